package install

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Tools runs the system's tools (dpkg-divert, update-alternatives,
// alternatives, systemctl, chroot) with a fixed argument list: argv[0] is
// the tool's name, never a path or a shell.
type Tools interface {
	Run(ctx context.Context, argv ...string) error
}

// ExecTools runs the tools from /usr/sbin, /usr/bin, /sbin or /bin (never
// $PATH: reboot or halt there may be gnsh itself, and a tool must be the
// system's), with a fixed environment, and returns their output in the
// error when they fail.
type ExecTools struct{}

var toolDirs = []string{"/usr/sbin", "/usr/bin", "/sbin", "/bin"}

func (ExecTools) Run(ctx context.Context, argv ...string) error {
	path := ""
	for _, d := range toolDirs {
		p := filepath.Join(d, argv[0])
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			path = p
			break
		}
	}
	if path == "" {
		return fmt.Errorf("%s not found in %s", argv[0], strings.Join(toolDirs, ", "))
	}
	cmd := exec.CommandContext(ctx, path, argv[1:]...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := strings.Join(strings.Fields(out.String()), " ")
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("%s: %s", strings.Join(argv, " "), msg)
	}
	return nil
}
