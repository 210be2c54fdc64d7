package drainer

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gnsh/gnsh/internal/legacy"
)

// A kubeconfig named in the config file that cannot be used is a mistake
// in the configuration: the shutdown is refused before anything changes,
// naming where the name came from and the ways round (issue 19). It was a
// warning, "API server unreachable (--kubeconfig: stat …)", and an
// undrained reboot.
func TestNamedKubeconfigMissing(t *testing.T) {
	d := newDrainer(t, nil, "kubeconfig: /nonexistent/kubeconfig\n")
	want := "gnsh: kubeconfig in " + d.ConfigPath + ": /nonexistent/kubeconfig does not exist; nothing was shut down: " +
		"fix the kubeconfig key or remove it (gnsh then looks in $KUBECONFIG, /etc/kubernetes/kubelet.conf, /var/lib/rancher/k3s/agent/kubelet.kubeconfig, /var/lib/rancher/rke2/agent/kubelet.kubeconfig, /etc/gnsh/kubeconfig), " +
		"or run the command again with --no-drain"
	for name, req := range map[string]*legacy.Request{
		"reboot": reboot(),
		// Beyond the drain timeout: the node agent could not drain ahead
		// of it either.
		"shutdown -r +60": scheduledReboot(time.Hour),
	} {
		d.stderr.Reset()
		_, err := d.prepare(t, req)
		refusal(t, err, want)
		if r := err.(*Refusal); r.Msg != want || d.stderr.Len() != 0 {
			t.Errorf("%s: refusal %q, stderr %q", name, r.Msg, d.stderr)
		}
	}
	// --no-drain goes without it; -f goes on, with a warning.
	noDrain := reboot()
	noDrain.Drain.Skip = true
	if err := d.handOff(t, noDrain, nil); err != nil {
		t.Fatalf("--no-drain: %v", err)
	}
	force := reboot()
	force.Force = 1
	d.stderr.Reset()
	if err := d.handOff(t, force, nil); err != nil ||
		!strings.Contains(d.stderr.String(), "gnsh: warning: kubeconfig in "+d.ConfigPath+": /nonexistent/kubeconfig does not exist; not cordoning") {
		t.Fatalf("-f: %v %q", err, d.stderr)
	}
	// gnsh plan says it, and gnsh drain refuses too.
	if got := d.Describe(reboot()); !strings.HasPrefix(got, "refuse: kubeconfig in ") {
		t.Errorf("Describe: %q", got)
	}
	if _, err := d.PlanPreparer().Prepare(context.Background(), reboot()); err == nil || err.Error() != want {
		t.Errorf("plan: %v", err)
	}
	err := d.DrainCommand(context.Background(), 0, false, os.Stdout)
	refusal(t, err, "gnsh: kubeconfig in "+d.ConfigPath+": /nonexistent/kubeconfig does not exist; fix the kubeconfig key or remove it")
	// --kubeconfig names its own way round.
	d.Kubeconfig = filepath.Join(d.KubeRoot, "typo.conf")
	err = d.UncordonCommand(context.Background(), false, os.Stdout)
	refusal(t, err, "gnsh: --kubeconfig: "+d.Kubeconfig+" does not exist; pass a kubeconfig that exists, or leave --kubeconfig out")
}

// One that is there, but not a kubeconfig, is refused the same way.
func TestNamedKubeconfigInvalid(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(bad, []byte("not: [a kubeconfig\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newDrainer(t, nil, "kubeconfig: "+bad+"\n")
	_, err := d.prepare(t, reboot())
	refusal(t, err, "gnsh: kubeconfig in "+d.ConfigPath+": "+bad+" is not a usable kubeconfig (", "--no-drain")
	for _, p := range []string{dir, "/dev/null"} {
		d := newDrainer(t, nil, "kubeconfig: "+p+"\n")
		_, err := d.prepare(t, reboot())
		refusal(t, err, "gnsh: kubeconfig in "+d.ConfigPath+": "+p+" is not a regular file; nothing was shut down")
	}
}

// Only a kubeconfig named is held to it: none found is still "not a
// Kubernetes node", silently (kubeadm join has not run yet).
func TestUnnamedKubeconfigAbsent(t *testing.T) {
	d := newDrainer(t, nil, "drainTimeout: 1m\n")
	if p, err := d.prepare(t, reboot()); err != nil || p != nil || d.stderr.Len() != 0 {
		t.Fatalf("%v %v %q", p, err, d.stderr)
	}
}

// An API server that cannot be reached, without node set, is said to be
// unreachable: not "no Node is called …; set node" (issue 19). The reboot
// goes on, as for any unreachable API server.
func TestUnreachableWithoutNodeName(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now: connection refused
	d := newDrainer(t, nil, "apiTimeout: 2s\n")
	d.Hostname = func() (string, error) { return "vm", nil }
	kc := filepath.Join(d.KubeRoot, "etc", "gnsh", "kubeconfig")
	if err := os.MkdirAll(filepath.Dir(kc), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://%s", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: abc}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`, addr)
	if err := os.WriteFile(kc, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.handOff(t, reboot(), nil); err != nil {
		t.Fatal(err)
	}
	// gnsh's own kubeconfig, reached for want of kubelet.conf, is the
	// drain's fallback, said first (issue 22).
	out, ok := strings.CutPrefix(d.stderr.String(), "gnsh: "+fallbackLine(d.KubeRoot)+"\n")
	if !ok {
		t.Fatalf("no fallback line: %q", d.stderr.String())
	}
	if !strings.HasPrefix(out, "gnsh: warning: API server unreachable (") || !strings.Contains(out, "connection refused") ||
		!strings.HasSuffix(out, "; rebooting without draining\n") || strings.Contains(out, "set node") || strings.Contains(out, "no Node") {
		t.Fatalf("stderr %q", out)
	}
	// gnsh drain says the same, and that nothing was cordoned.
	d.stderr.Reset()
	err = d.DrainCommand(context.Background(), 0, false, os.Stdout)
	refusal(t, err, "gnsh: API server unreachable (")
	if strings.Contains(err.Error(), "set node") {
		t.Fatalf("%v", err)
	}
}

// gnsh's own /etc/gnsh/kubeconfig, not named by the config file, that is
// there but cannot be used refuses as a named one does (issue 19: the
// reboot went on undrained, with a warning): only an admin or the Ansible
// role puts it there. A broken kubelet.conf is not gnsh's to judge.
func TestGnshOwnKubeconfigBroken(t *testing.T) {
	d := newDrainer(t, nil, "drainTimeout: 1m\n")
	own := filepath.Join(d.KubeRoot, "etc", "gnsh", "kubeconfig")
	if err := os.MkdirAll(filepath.Dir(own), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(own, []byte("not: [a kubeconfig\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, req := range map[string]*legacy.Request{"reboot": reboot(), "shutdown -r +60": scheduledReboot(time.Hour)} {
		d.stderr.Reset()
		_, err := d.prepare(t, req)
		refusal(t, err, "gnsh: gnsh's own kubeconfig: "+own+" is not a usable kubeconfig (",
			"; nothing was shut down: fix "+own+" (the Ansible role writes it when given gnsh_kubectl_kubeconfig) or remove it "+
				"(the reboot-slot gate then uses the drain's kubeconfig), or run the command again with --no-drain")
		if d.stderr.Len() != 0 {
			t.Errorf("%s: stderr %q", name, d.stderr)
		}
	}
	if _, err := d.PlanPreparer().Prepare(context.Background(), reboot()); err == nil || !strings.Contains(err.Error(), "gnsh's own kubeconfig: "+own) {
		t.Errorf("plan: %v", err)
	}
	err := d.DrainCommand(context.Background(), 0, false, os.Stdout)
	refusal(t, err, "gnsh: gnsh's own kubeconfig: "+own+" is not a usable kubeconfig (", "fix "+own)
	// --no-drain goes without it.
	noDrain := reboot()
	noDrain.Drain.Skip = true
	if err := d.handOff(t, noDrain, nil); err != nil {
		t.Fatalf("--no-drain: %v", err)
	}
}

// A config file that is a symbolic link to nothing refuses as an invalid
// file does: its gate: required must not quietly become optional, nor a
// node look like no node (issue 19).
func TestConfigDanglingLinkRefuses(t *testing.T) {
	d := newDrainer(t, nil, "")
	if err := os.Remove(d.ConfigPath); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := os.Symlink("/nonexistent/gnsh.yaml", d.ConfigPath); err != nil {
		t.Fatal(err)
	}
	_, err := d.prepare(t, reboot())
	refusal(t, err, "gnsh: "+d.ConfigPath+": a symbolic link to /nonexistent/gnsh.yaml, which does not exist; point it at the config file, or remove it for the defaults\n"+
		"gnsh: nothing was shut down; fix the file, or run the command again with --no-drain")
}
