package drainer

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gnsh/gnsh/internal/config"
)

// gnsh config check refuses what the wrapper refuses as a mistake in the
// configuration, and accepts what it accepts: gnsh's own
// /etc/gnsh/kubeconfig included, which refuses every shutdown when it
// cannot be used and the file names no kubeconfig (config check said
// "valid" while every reboot was refused). A broken kubelet.conf is not
// gnsh's to judge, for either.
func TestConfigCheckAgreesWithWrapper(t *testing.T) {
	const usable = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:1\"}\n" +
		"users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"
	for _, tt := range []struct {
		name, config string
		own, kubelet string // the content of /etc/gnsh/kubeconfig and kubelet.conf ("" none; "->X" a link to X)
		refused      string // a line of config check's (and the wrapper's refusal's) message; "" for none
	}{
		{"valid", "apiTimeout: 1s\n", "", "", ""},
		{"valid, own kubeconfig usable", "apiTimeout: 1s\n", usable, "", ""},
		{"own kubeconfig broken", "apiTimeout: 1s\n", "not: [a kubeconfig\n", "", "kubeconfig: not set, so gnsh's own kubeconfig is used, and "},
		{"own kubeconfig a link to nothing", "apiTimeout: 1s\n", "->/nonexistent/kc", "", "a symbolic link to /nonexistent/kc, which does not exist;"},
		// The gate (optional by default) uses gnsh's own kubeconfig
		// beside the one named: a broken one is a mistake (issue 22).
		{"own kubeconfig broken, another named", "apiTimeout: 1s\nkubeconfig: KC\n", "not: [a kubeconfig\n", "", " is not a usable kubeconfig ("},
		{"slots.kubeconfig missing", "apiTimeout: 1s\nslots: {kubeconfig: /nonexistent/gate}\n", "", usable, "fix slots.kubeconfig or remove it (the reboot-slot gate then uses /etc/gnsh/kubeconfig if it is there, else the drain's kubeconfig)"},
		{"own kubeconfig broken, another named, gate off", "apiTimeout: 1s\nkubeconfig: KC\nslots: {gate: off}\n", "not: [a kubeconfig\n", "", ""},
		{"kubelet.conf broken", "apiTimeout: 1s\n", "", "not: [a kubeconfig\n", ""},
		{"typo", "drian: false\n", "", "", "drian: unknown key"},
		{"named kubeconfig missing", "kubeconfig: /nonexistent/kubeconfig\n", "", "", "/nonexistent/kubeconfig does not exist"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := newDrainer(t, nil, "")
			kc := filepath.Join(t.TempDir(), "kubeconfig")
			if err := os.WriteFile(kc, []byte(usable), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(d.ConfigPath, []byte(strings.ReplaceAll(tt.config, "KC", kc)), 0o644); err != nil {
				t.Fatal(err)
			}
			for path, content := range map[string]string{"etc/gnsh/kubeconfig": tt.own, "etc/kubernetes/kubelet.conf": tt.kubelet} {
				p := filepath.Join(d.KubeRoot, path)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				var err error
				switch {
				case content == "":
				case strings.HasPrefix(content, "->"):
					err = os.Symlink(content[2:], p)
				default:
					err = os.WriteFile(p, []byte(content), 0o600)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			_, unchecked, cerr := d.CheckConfigFile(false)
			if unchecked != nil {
				t.Fatalf("unchecked: %v", unchecked)
			}
			_, werr := d.prepare(t, reboot())
			var r *Refusal
			wrapperRefuses := errors.As(werr, &r)
			if (cerr != nil) != wrapperRefuses || (tt.refused != "") != wrapperRefuses {
				t.Fatalf("config check: %v\nthe wrapper: %v", cerr, werr)
			}
			if tt.refused != "" && (!strings.Contains(cerr.Error(), tt.refused) || !strings.Contains(r.Msg, strings.TrimPrefix(tt.refused, "kubeconfig: not set, so gnsh's own kubeconfig is used, and "))) {
				t.Errorf("config check: %v\nthe wrapper: %v\nwant %q in both", cerr, werr, tt.refused)
			}
			// gnsh doctor's config check leaves gnsh's own kubeconfig to
			// its kubeconfig check.
			if _, derr := d.CheckConfig(false); tt.own != "" && strings.Contains(tt.name, "own kubeconfig") && derr != nil {
				t.Errorf("doctor's config check: %v", derr)
			}
		})
	}
}

// With drain: false, shutdowns go on whatever the kubeconfig; one named
// that cannot be used is still a mistake (gnsh drain, gnsh uncordon and
// the node agent need it), which config check reports without saying
// that shutdowns are refused.
func TestConfigCheckDrainFalseKubeconfig(t *testing.T) {
	d := newDrainer(t, nil, "drain: false\nkubeconfig: /nonexistent/kubeconfig\n")
	if p, err := d.prepare(t, reboot()); p != nil || err != nil {
		t.Fatalf("the wrapper: %v %v", p, err)
	}
	_, _, err := d.CheckConfigFile(false)
	var ce *config.Error
	if !errors.As(err, &ce) || len(ce.Problems) != 1 {
		t.Fatalf("config check: %v", err)
	}
	if msg := ce.Problems[0].Msg; strings.Contains(msg, "refused") || !strings.Contains(msg, "with drain: false, shutdowns go on undrained") {
		t.Errorf("config check: %q", msg)
	}
}
