//go:build e2e

package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sandboxProbe runs in place of `gnsh agent` under gnsh.service's own
// [Service] lines (a drop-in that changes only ExecStart= and Type=): one
// line per write, "ok NAME" or "fail NAME", into /run/gnsh/probe.out.
const sandboxProbe = `#!/bin/sh
out=/run/gnsh/probe.out
: >"$out"
try() {
	name=$1; shift
	if "$@" 2>>/run/gnsh/probe.err; then echo "ok $name" >>"$out"; else echo "fail $name" >>"$out"; fi
}
# The gate's token, as internal/gatetoken writes it: a new file beside the
# kubeconfig, renamed over it.
try etc-gnsh-write sh -c 'echo token >/etc/gnsh/.kubeconfig.probe'
try etc-gnsh-rename mv /etc/gnsh/.kubeconfig.probe /etc/gnsh/kubeconfig.probe
# The reboot parameter: what a queued reboot's hand-off did before.
try reboot-param-write sh -c 'echo fw >/run/systemd/reboot-param'
try reboot-param-unlink rm /run/systemd/reboot-param
# Its own directory, and anywhere else.
try run-gnsh-write sh -c 'echo x >/run/gnsh/probe.tmp'
try etc-write sh -c 'echo x >/etc/gnsh-probe'
`

// unitSandbox proves the shipped unit's sandbox end to end: the agent
// starts without /etc/gnsh (the "-" of ReadWritePaths=); under the same
// [Service] lines a process can write and rename in /etc/gnsh (the gate
// token's renewal) and in /run/gnsh, and nowhere else: not
// /run/systemd/reboot-param, which the agent therefore must never need
// (a queued reboot's hand-off leaves it alone).
func unitSandbox(a *agentRun) {
	t, c := a.t, a.c
	a.row.what = "sandbox: /etc/gnsh and /run/gnsh writable, /run/systemd not"
	if r := c.in(5*time.Second, "test", "-e", "/etc/gnsh"); r.rc == 0 {
		t.Fatal("the rig has /etc/gnsh: the case means to start the agent without it")
	}
	// install() started the agent with /etc/gnsh missing: the "-" made
	// systemd ignore it rather than fail the unit (226/NAMESPACE).
	c.must("systemctl", "is-active", "--quiet", agentUnit)
	c.must("sh", "-ec", `mkdir -p /etc/gnsh && echo keep >/run/systemd/reboot-param`)
	mustWrite(t, filepath.Join(c.dir, "rig", "probe.sh"), sandboxProbe)
	mustWrite(t, filepath.Join(c.dir, "rig", "probe.conf"), "[Service]\nType=oneshot\nRestart=no\nExecStart=\nExecStart=/bin/sh /rig/probe.sh\n")
	c.must("sh", "-ec", `systemctl stop `+agentUnit+`
		mkdir -p /etc/systemd/system/`+agentUnit+`.d
		install -m 0644 /rig/probe.conf /etc/systemd/system/`+agentUnit+`.d/probe.conf
		systemctl daemon-reload`)
	if r := c.in(30*time.Second, "systemctl", "start", agentUnit); r.rc != 0 {
		st := c.in(10*time.Second, "systemctl", "status", "--no-pager", "-l", agentUnit)
		t.Fatalf("systemctl start %s with the probe: %s\n%s", agentUnit, r, st.stdout)
	}
	out := c.must("cat", "/run/gnsh/probe.out").stdout
	errs := c.in(5*time.Second, "cat", "/run/gnsh/probe.err").stdout
	c.logf("probe under %s:\n%s%s", agentUnit, out, errs)
	want := "ok etc-gnsh-write\nok etc-gnsh-rename\nfail reboot-param-write\nfail reboot-param-unlink\nok run-gnsh-write\nfail etc-write\n"
	if out != want {
		t.Errorf("writes under %s's sandbox:\n%swant:\n%s(errors: %s)", agentUnit, out, want, errs)
	}
	if n := strings.Count(errs, "Read-only file system"); n != 3 {
		t.Errorf("%d refusals as read-only, want 3 (reboot-param write and unlink, /etc): %s", n, errs)
	}
	if got := strings.TrimSpace(c.must("cat", "/run/systemd/reboot-param").stdout); got != "keep" {
		t.Errorf("/run/systemd/reboot-param = %q, want it untouched", got)
	}
	if got := strings.TrimSpace(c.must("cat", "/etc/gnsh/kubeconfig.probe").stdout); got != "token" {
		t.Errorf("/etc/gnsh/kubeconfig.probe = %q after the rename", got)
	}
	c.terminate()
}

// expectTokenRenewed checks that q's agent, started after since, renewed
// the gate's token in /etc/gnsh/kubeconfig (the role's dedicated
// credentials) under the shipped gnsh.service: its state file says so,
// with no error (the agent renews at start).
func (q *qNode) expectTokenRenewed(t *testing.T, since time.Time) {
	t.Helper()
	var st struct {
		Path    string    `json:"path"`
		Renewed time.Time `json:"renewed"`
		Error   string    `json:"error"`
	}
	var raw string
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		x := q.in(10*time.Second, "cat", "/run/gnsh/gate-token.json")
		raw = x.stdout
		if x.rc == 0 && json.Unmarshal([]byte(raw), &st) == nil && st.Error == "" && !st.Renewed.Before(since.Add(-time.Second)) {
			t.Logf("%s: the agent renewed the gate's token under gnsh.service: %s", q.name(), strings.TrimSpace(raw))
			return
		}
		if time.Now().After(end) {
			break
		}
	}
	t.Errorf("%s: the agent did not renew the gate's token under gnsh.service within 20 s of its start: %s", q.name(), raw)
}
