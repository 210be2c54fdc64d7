package kube

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestUnreadable: a kubeconfig, or a file it names, that exists but that
// this user may not read is an *UnreadableError naming that file, not "no
// kubeconfig" and not a failure to connect. Root reads any file, so the
// checks run in a child as nobody (uid 65534) on files made 0600 by root.
func TestUnreadable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make files another user cannot read")
	}
	const nobody = 65534
	bin := userBinary(t)
	d := traversable(t)
	mk := func(rel, content string, mode os.FileMode) string {
		p := filepath.Join(d, rel)
		for dir := filepath.Dir(p); dir != d; dir = filepath.Dir(dir) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cert := string(certPEM(t, "system:node:worker-7"))
	kc := func(user string) string {
		return strings.Replace(kubeconfig, "{client-certificate: pki/client.pem, client-key: pki/client.pem}", user, 1)
	}
	type locate = locateCase
	cases := []struct {
		name  string
		setup func(dir string) locate
		// want: "find:unreadable", "rest:unreadable", "find:none" or "ok";
		// path: the file the error names, relative to dir.
		want, path string
	}{
		{"kubelet.conf 0600", func(dir string) locate {
			mk(dir+"/root/etc/kubernetes/kubelet.conf", kubeconfig, 0o600)
			return locate{Root: d + "/" + dir + "/root"}
		}, "find:unreadable", "root/etc/kubernetes/kubelet.conf"},
		{"$KUBECONFIG 0600, kubelet.conf readable", func(dir string) locate {
			mk(dir+"/root/etc/kubernetes/kubelet.conf", kubeconfig, 0o644)
			return locate{Root: d + "/" + dir + "/root", KUBECONFIG: mk(dir+"/env.conf", kubeconfig, 0o600)}
		}, "find:unreadable", "env.conf"},
		{"--kubeconfig 0600", func(dir string) locate {
			return locate{Kubeconfig: mk(dir+"/flag.conf", kubeconfig, 0o600), Root: d + "/" + dir}
		}, "find:unreadable", "flag.conf"},
		{"directory 0700", func(dir string) locate {
			p := mk(dir+"/private/kubeconfig", kubeconfig, 0o644)
			if err := os.Chmod(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			return locate{KUBECONFIG: p, Root: d + "/" + dir}
		}, "find:unreadable", "private/kubeconfig"},
		{"client certificate 0600", func(dir string) locate {
			mk(dir+"/pki/client.pem", cert, 0o600)
			return locate{KUBECONFIG: mk(dir+"/kc", kubeconfig, 0o644), Root: d + "/" + dir}
		}, "rest:unreadable", "pki/client.pem"},
		{"client key 0600", func(dir string) locate {
			mk(dir+"/pki/cert.pem", cert, 0o644)
			mk(dir+"/pki/key.pem", cert, 0o600)
			return locate{KUBECONFIG: mk(dir+"/kc", kc("{client-certificate: pki/cert.pem, client-key: pki/key.pem}"), 0o644), Root: d + "/" + dir}
		}, "rest:unreadable", "pki/key.pem"},
		{"token file 0600", func(dir string) locate {
			mk(dir+"/token", "secret", 0o600)
			return locate{KUBECONFIG: mk(dir+"/kc", kc("{tokenFile: token}"), 0o644), Root: d + "/" + dir}
		}, "rest:unreadable", "token"},
		{"certificate authority 0600", func(dir string) locate {
			mk(dir+"/pki/client.pem", cert, 0o644)
			mk(dir+"/ca.pem", cert, 0o600)
			k := strings.Replace(kubeconfig, "insecure-skip-tls-verify: true", "certificate-authority: ca.pem", 1)
			return locate{KUBECONFIG: mk(dir+"/kc", k, 0o644), Root: d + "/" + dir}
		}, "rest:unreadable", "ca.pem"},
		{"all readable", func(dir string) locate {
			mk(dir+"/pki/client.pem", cert, 0o644)
			return locate{KUBECONFIG: mk(dir+"/kc", kubeconfig, 0o644), Root: d + "/" + dir}
		}, "ok", ""},
		{"none", func(dir string) locate {
			return locate{KUBECONFIG: d + "/" + dir + "/missing", Root: d + "/" + dir}
		}, "find:none", ""},
	}
	// Set every case up, then check them all in one child (a race-enabled
	// test binary takes a second to start).
	dirs := make([]string, len(cases))
	locs := make([]locate, len(cases))
	for i, tt := range cases {
		dirs[i] = strings.NewReplacer(" ", "_", "$", "", "/", "", ",", "").Replace(tt.name)
		if err := os.MkdirAll(filepath.Join(d, dirs[i]), 0o755); err != nil {
			t.Fatal(err)
		}
		locs[i] = tt.setup(dirs[i])
	}
	c, _ := json.Marshal(locs)
	stdout, _ := runHelper(t, bin, "locate", nobody, "GNSH_KUBE_CASE="+string(c))
	var results []helperResult
	if err := json.NewDecoder(strings.NewReader(stdout)).Decode(&results); err != nil || len(results) != len(cases) {
		t.Fatalf("helper output %q: %v", stdout, err)
	}
	for i, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			res := results[i]
			got, path, msg := "ok", "", ""
			switch {
			case res.FindErr != "":
				got, path, msg = "find:"+res.FindKind, res.FindPath, res.FindErr
			case res.RESTErr != "":
				got, path, msg = "rest:"+res.RESTKind, res.RESTPath, res.RESTErr
			}
			wantPath := ""
			if tt.path != "" {
				wantPath = filepath.Join(d, dirs[i], tt.path)
			}
			if got != tt.want || path != wantPath {
				t.Fatalf("as uid %d: %s %q (%s); want %s %q", nobody, got, path, msg, tt.want, wantPath)
			}
			if strings.HasSuffix(tt.want, "unreadable") && msg != "cannot read "+wantPath+": permission denied" {
				t.Errorf("message %q", msg)
			}
		})
	}
}

func TestUnreadableError(t *testing.T) {
	err := error(&UnreadableError{Path: "/etc/kubernetes/kubelet.conf",
		Err: &fs.PathError{Op: "open", Path: "/etc/kubernetes/kubelet.conf", Err: syscall.EACCES}})
	if err.Error() != "cannot read /etc/kubernetes/kubelet.conf: permission denied" {
		t.Errorf("Error() = %q", err)
	}
	if !errors.Is(err, fs.ErrPermission) || !errors.Is(err, syscall.EACCES) || errors.Is(err, ErrNoKubeconfig) {
		t.Errorf("Unwrap: %v", err)
	}
	if u := unreadable("x", syscall.EPERM); u == nil {
		t.Error("EPERM is a permission error too")
	}
	if u := unreadable("x", syscall.ENOENT); u != nil {
		t.Errorf("ENOENT gave %v", u)
	}
}
