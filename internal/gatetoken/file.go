package gatetoken

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Kubeconfig is gnsh's own kubeconfig, the gate's: one cluster, one user
// with an embedded token, one context.
type Kubeconfig struct {
	Path   string
	Config *clientcmdapi.Config
}

// SymlinkError is a kubeconfig path that is a symbolic link: gnsh neither
// reads its token through one nor replaces one, which would write where
// the link points.
type SymlinkError struct{ Path string }

func (e *SymlinkError) Error() string {
	return e.Path + " is a symbolic link: gnsh renews the gate's token only in a regular file; replace the link with the file it points to"
}

// maxKubeconfig bounds what Load reads.
const maxKubeconfig = 1 << 20

// Load reads the kubeconfig at path, refusing a symbolic link. A missing
// file is an error satisfying errors.Is(err, fs.ErrNotExist).
func Load(path string) (*Kubeconfig, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, &SymlinkError{Path: path}
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKubeconfig+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxKubeconfig {
		return nil, fmt.Errorf("%s is larger than %d bytes: not a kubeconfig", path, maxKubeconfig)
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("%s is not a kubeconfig: %w", path, err)
	}
	return &Kubeconfig{Path: path, Config: cfg}, nil
}

// user is the current context's user, nil if there is none.
func (k *Kubeconfig) user() *clientcmdapi.AuthInfo {
	ctx := k.Config.Contexts[k.Config.CurrentContext]
	if ctx == nil {
		return nil
	}
	return k.Config.AuthInfos[ctx.AuthInfo]
}

// Token is the current context's embedded token, "" if none.
func (k *Kubeconfig) Token() string {
	if u := k.user(); u != nil {
		return u.Token
	}
	return ""
}

// SetToken replaces the current context's embedded token; every other
// field stays as it was. It is an error when the user has no embedded
// token to replace (a client certificate, a token file, a plugin).
func (k *Kubeconfig) SetToken(token string) error {
	u := k.user()
	if u == nil || u.Token == "" {
		return fmt.Errorf("%s: the current context's user has no embedded token", k.Path)
	}
	u.Token = token
	return nil
}

// Save writes the kubeconfig to its path atomically: a new file (0600) in
// the same directory, synced, renamed over the old one, the directory
// synced. A symbolic link at the path is refused (rename would replace
// the link, not the file, which would then differ from what the link's
// other readers see). A process that reads the path sees the old file or
// the new one, never a part.
func (k *Kubeconfig) Save() error {
	data, err := clientcmd.Write(*k.Config)
	if err != nil {
		return fmt.Errorf("%s: %w", k.Path, err)
	}
	return WriteFile(k.Path, data)
}

// WriteFile writes data to path as Save does.
func WriteFile(path string, data []byte) error {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return &SymlinkError{Path: path}
	} else if err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file: remove it", path)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// New is a kubeconfig shaped as the Ansible role's template writes it
// (install/ansible/roles/gnsh/templates/kubeconfig.j2): cluster "default"
// (server, CA data), user "gnsh" with the token, context "default".
func New(path, server string, caData []byte, token string) *Kubeconfig {
	cfg := clientcmdapi.NewConfig()
	c := clientcmdapi.NewCluster()
	c.Server, c.CertificateAuthorityData = server, caData
	cfg.Clusters["default"] = c
	u := clientcmdapi.NewAuthInfo()
	u.Token = token
	cfg.AuthInfos["gnsh"] = u
	ctx := clientcmdapi.NewContext()
	ctx.Cluster, ctx.AuthInfo = "default", "gnsh"
	cfg.Contexts["default"] = ctx
	cfg.CurrentContext = "default"
	return &Kubeconfig{Path: path, Config: cfg}
}
