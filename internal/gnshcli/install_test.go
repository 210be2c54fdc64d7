package gnshcli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The command line of gnsh install and uninstall: flags reach the
// package, errors are one line and exit 1, a dry run changes nothing.
func TestInstallCommandLine(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/os-release"), []byte("ID=arch\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args    []string
		code    int
		out     string // a line of stdout
		errLine string // stderr's only line, prefix
	}{
		{[]string{"install", "--root", root, "--dry-run"}, 0, "gnsh: dry run, not done: linked /usr/local/sbin/reboot to /usr/local/sbin/gnsh", ""},
		{[]string{"install", "--root", root, "--dry-run", "--mode", "divert"}, 1, "", "gnsh: --mode divert needs dpkg (Debian, Ubuntu) or rpm (the RHEL family), and /etc/os-release says ID=arch; fix: use --mode symlink"},
		{[]string{"install", "--root", root, "--mode", "sideways"}, 1, "", `gnsh: unknown --mode "sideways"; fix: `},
		{[]string{"install", "--root", root, "--packaged", "--dry-run"}, 1, "", "gnsh: --packaged: /usr/sbin/gnsh is missing; fix: install the gnsh package"},
		{[]string{"install", "extra"}, 1, "", `gnsh: install takes no arguments (got "extra")`},
		{[]string{"uninstall", "--root", root}, 0, "gnsh: nothing to change", ""},
	} {
		env, out, errb := testEnv(t)
		code := Run(context.Background(), append([]string{"gnsh"}, tc.args...), env)
		if code != tc.code {
			t.Errorf("%q: exit %d, want %d (stderr %q)", tc.args, code, tc.code, errb)
		}
		if tc.out != "" && !strings.Contains(out.String(), tc.out+"\n") {
			t.Errorf("%q: stdout lacks %q:\n%s", tc.args, tc.out, out)
		}
		if tc.errLine != "" && (!strings.HasPrefix(errb.String(), tc.errLine) || strings.Count(errb.String(), "\n") != 1) {
			t.Errorf("%q: stderr %q, want one line starting %q", tc.args, errb, tc.errLine)
		}
		if tc.errLine == "" && errb.Len() != 0 {
			t.Errorf("%q: stderr %q", tc.args, errb)
		}
	}
	ents, _ := os.ReadDir(root)
	if len(ents) != 1 {
		t.Errorf("the dry runs changed %s: %v", root, ents)
	}
}
