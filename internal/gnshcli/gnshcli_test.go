package gnshcli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/handoff"
	"github.com/gnsh/gnsh/internal/system"
)

// testEnv has no bus and no kernel: plan must not need them.
func testEnv(t *testing.T) (*dispatch.Env, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	env := &dispatch.Env{
		Stdout: &out, Stderr: &errb, Now: func() time.Time { return now }, Location: time.UTC,
		LookupEnv: func(string) (string, bool) { return "", false },
		Host:      &system.Host{Root: t.TempDir(), Getenv: func(string) string { return "" }},
		DialLogind: func(context.Context) (handoff.Logind, error) {
			t.Fatal("plan dialled logind")
			return nil, nil
		},
	}
	return env, &out, &errb
}

func TestPlan(t *testing.T) {
	env, out, errb := testEnv(t)
	code := Run(context.Background(), []string{"gnsh", "plan", "-o", "json", "shutdown", "-r", "+5", "kernel", "update"}, env)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	var p handoff.Plan
	if err := json.Unmarshal(out.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if p.Action != "reboot" || p.Immediate || p.Scheduled == nil || p.Scheduled.RFC3339 != "2026-11-21T10:05:00Z" ||
		p.Wall == nil || p.Wall.Message != "kernel update" || !p.Wall.Enabled {
		t.Fatalf("plan %+v", p)
	}
	var methods []string
	for _, c := range p.Calls {
		methods = append(methods, c.Method)
	}
	if strings.Join(methods, ",") != "Introspect,SetWallMessage,ScheduleShutdown,Get" {
		t.Fatalf("calls %v", methods)
	}
	if want := "Reboot scheduled for Sat 2026-11-21 10:05:00 UTC, use 'shutdown -c' to cancel.\n"; errb.String() != want || p.Stderr != want {
		t.Fatalf("stderr %q / %q", errb, p.Stderr)
	}
}

// gnsh plan's text form: a few lines for a terminal, wrapped to the
// width, the command's messages on stderr and its exit status.
func TestPlanText(t *testing.T) {
	env, out, errb := testEnv(t)
	env.LookupEnv = func(k string) (string, bool) { return map[string]string{"COLUMNS": "80"}[k], k == "COLUMNS" }
	code := Run(context.Background(), []string{"gnsh", "plan", "shutdown", "-r", "+5", "kernel", "update"}, env)
	want := `action    reboot at 2026-11-21T10:05:00Z, wall message "kernel update"
calls     logind SetWallMessage("kernel update", true), logind
          ScheduleShutdown("reboot", 1795255500000000)
fallback  none: if systemd-logind does not take the schedule, the command is
          refused (exit 1) and nothing is shut down
says      Reboot scheduled for Sat 2026-11-21 10:05:00 UTC, use 'shutdown -c' to
          cancel.
exit      0; nothing was done (-o json lists every call)
`
	// What the command would say is a row, never plan's own stderr: an
	// admin would read it as said by what plan did (issue 19).
	if code != 0 || out.String() != want || errb.String() != "" {
		t.Errorf("exit %d, stderr %q:\n%s\nwant:\n%s", code, errb, out, want)
	}
	env, out, errb = testEnv(t)
	if code := Run(context.Background(), []string{"gnsh", "plan", "reboot", "-f", "fw"}, env); code != 0 ||
		!strings.HasPrefix(out.String(), "action     reboot now, forced twice (-ff): at once through the kernel, no service stopped\n"+
			"parameter  \"fw\" written to /run/systemd/reboot-param\n"+
			"calls      file write \"/run/systemd/reboot-param\", \"fw\", sync(), reboot(CAD_ON), reboot(RESTART2,\n"+
			"           fw)\n") {
		t.Errorf("reboot -f fw: exit %d, stderr %q:\n%s", code, errb, out)
	}
	// A refused command line: its message and status, no call.
	env, out, errb = testEnv(t)
	if code := Run(context.Background(), []string{"gnsh", "plan", "halt", "now"}, env); code != 1 || errb.String() != "" ||
		out.String() != "action  none: the command line is refused\nsays    Too many arguments.\nexit    1; nothing was done (-o json lists every call)\n" {
		t.Errorf("halt now: exit %d, stderr %q:\n%s", code, errb, out)
	}
	// -o goes before the command name; after it, it is the command's.
	env, out, errb = testEnv(t)
	if code := Run(context.Background(), []string{"gnsh", "plan", "reboot", "-o", "json"}, env); code != 1 ||
		out.String() != "action  none: the command line is refused\nsays    reboot: invalid option -- 'o'\nexit    1; nothing was done (-o json lists every call)\n" || errb.String() != "" {
		t.Errorf("reboot -o json: exit %d, stderr %q:\n%s", code, errb, out)
	}
}

func TestPlanParseError(t *testing.T) {
	env, out, errb := testEnv(t)
	code := Run(context.Background(), []string{"gnsh", "plan", "--output=json", "halt", "now"}, env)
	var p handoff.Plan
	if err := json.Unmarshal(out.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if code != 1 || p.ExitCode != 1 || errb.String() != "Too many arguments.\n" || len(p.Calls) != 0 {
		t.Fatalf("exit %d, plan %+v, stderr %q", code, p, errb)
	}
}

func TestPlanForceAndParam(t *testing.T) {
	env, out, _ := testEnv(t)
	if code := Run(context.Background(), []string{"gnsh", "plan", "-ojson", "reboot", "-f", "fw"}, env); code != 0 {
		t.Fatalf("exit %d", code)
	}
	var p handoff.Plan
	if err := json.Unmarshal(out.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if p.Force != 2 || p.RebootParam == nil || p.RebootParam.Op != "write" || p.RebootParam.Value != "fw" || p.Fallback != nil {
		t.Fatalf("plan %+v", p)
	}
	var got []string
	for _, c := range p.Calls {
		got = append(got, c.Service+":"+c.Method)
	}
	// The parameter is only recorded as written, yet reboot(2) gets it.
	if strings.Join(got, " ") != "file:write kernel:sync kernel:reboot kernel:reboot" ||
		p.Calls[3].Args[0] != "RESTART2" || p.Calls[3].Args[1] != "fw" {
		t.Fatalf("calls %v", got)
	}
}

func TestUnknownCommandAndVersion(t *testing.T) {
	env, out, errb := testEnv(t)
	if code := Run(context.Background(), []string{"gnsh", "frobnicate"}, env); code != 1 ||
		!strings.Contains(errb.String(), `unknown command "frobnicate"`) {
		t.Fatalf("exit %d, %q", code, errb)
	}
	if code := Run(context.Background(), []string{"gnsh", "version"}, env); code != 0 || !strings.HasPrefix(out.String(), "gnsh ") {
		t.Fatalf("version: %d %q", code, out)
	}
}

// gnsh plan says what the gate does before the cordon: which slot, how
// long it waits, what a refusal and an unusable gate do, --force-quorum.
func TestPlanSlotStep(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "etc", "gnsh", "kubeconfig")
	if err := os.MkdirAll(filepath.Dir(kc), 0o755); err != nil {
		t.Fatal(err)
	}
	// Usable: gnsh's own kubeconfig is checked as a named one.
	conf := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:1\"}\n" +
		"users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"
	if err := os.WriteFile(kc, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		config string
		args   []string
		want   []string
		not    string
	}{
		{"#person\n", []string{"reboot"}, []string{
			"take a reboot slot of gnsh/reboot-slots first, waiting up to 5m0s in arrival order (slots.wait; none in time: refuse, exit 1, nothing cordoned; " +
				"gate unusable: go on without a slot (slots.gate: optional); a control-plane or etcd node also needs the etcd quorum kept), then cordon, evict, wait up to 5m0s"}, ""},
		{"slots:\n  gate: required\n  wait: 2m\n  namespace: ops\n  lease: slots\n", []string{"reboot", "--force-quorum"}, []string{
			"take a reboot slot of ops/slots first, waiting up to 2m0s",
			"gate unusable: refuse, exit 1 (slots.gate: required)",
			"--force-quorum: a control-plane or etcd node goes without the etcd quorum guard"}, ""},
		{"slots: {gate: off}\n", []string{"reboot"}, []string{"no reboot slot (slots.gate: off); cordon, evict"}, "take a reboot slot"},
		{"", []string{"reboot", "-f"}, []string{"no drain and no reboot slot"}, "take a reboot slot"},
		{"", []string{"reboot", "--no-drain"}, []string{"none: --no-drain (no drain and no reboot slot)"}, "take a reboot slot"},
		{"", []string{"shutdown", "-r", "+60"}, []string{"once it has a reboot slot of gnsh/reboot-slots (none before the schedule's time: it defers the reboot until one comes, within slots.queueFor: 24h0m0s)"}, ""},
		// Queued reboots (issue 21): auto queues automation, only with
		// the node agent running; always queues a person too.
		{"#agent\n", []string{"reboot"}, []string{"take a reboot slot of gnsh/reboot-slots first, if one is free at once (none: queued (no terminal on stdin and stderr; slots.queue: auto): " +
			"exit 0, nothing cordoned, and the node agent drains and hands off once one is free, in arrival order, or gives up after 24h0m0s (slots.queueFor)"}, "waiting up to"},
		{"", []string{"reboot"}, []string{"none in time: refuse, exit 1, nothing cordoned; it was not queued: the node agent is not running"}, "queued ("},
		{"#agent\n#person\nslots: {queue: always, window: WINDOW-IN}\n", []string{"reboot"},
			[]string{"queued (slots.queue: always)", "once one is free, within the window mon-sun "}, "waiting up to"},
		{"#agent\nslots: {window: WINDOW-OUT}\n", []string{"reboot"},
			[]string{"none now: queued (no terminal on stdin and stderr; slots.queue: auto) without asking for a reboot slot, outside the window mon-sun ", "once it is open and a slot is free"}, "cordon, evict"},
		{"#agent\nslots: {window: WINDOW-FAR}\n", []string{"reboot"},
			[]string{"refuse (exit 1 before any call to logind, nothing asked): it would be queued (no terminal on stdin and stderr; slots.queue: auto), but now is outside the window "}, "cordon"},
		{"#agent\nslots: {window: WINDOW-OUT}\n", []string{"reboot", "--no-queue"}, []string{"waiting up to 5m0s in arrival order"}, "queued"},
		{"#person\n#agent\n", []string{"reboot", "--queue"}, []string{"queued (--queue): exit 0"}, "waiting up to"},
		{"#agent\n#person\n", []string{"reboot"}, []string{"waiting up to 5m0s in arrival order (slots.wait; none in time: refuse, exit 1, nothing cordoned; " +
			"asked with no person at a terminal (a service, cron, Ansible) it would be queued instead (slots.queue: auto);"}, "queued ("},
	} {
		env, out, errb := testEnv(t)
		cfg := filepath.Join(t.TempDir(), "config.yaml")
		// Windows around the test's now: open now, opening in an hour,
		// and one whose next opening is days away (past slots.queueFor).
		now := env.Now().UTC()
		hm := func(d time.Duration) string { return now.Add(d).Format("15:04") }
		far := strings.ToLower(now.Add(72 * time.Hour).Weekday().String()[:3])
		refused := strings.Contains(tt.config, "WINDOW-FAR") // the command's exit status: 1
		tt.config = strings.NewReplacer(
			"WINDOW-IN", fmt.Sprintf("{start: %q, end: %q, timeZone: UTC}", hm(-time.Hour), hm(time.Hour)),
			"WINDOW-OUT", fmt.Sprintf("{start: %q, end: %q, timeZone: UTC}", hm(time.Hour), hm(2*time.Hour)),
			"WINDOW-FAR", fmt.Sprintf("{days: %s, start: %q, end: %q, timeZone: UTC}", far, hm(time.Hour), hm(2*time.Hour)),
		).Replace(tt.config)
		if err := os.WriteFile(cfg, []byte(tt.config), 0o644); err != nil {
			t.Fatal(err)
		}
		lockDir := t.TempDir()
		if strings.Contains(tt.config, "#agent") {
			l, err := drainer.HoldAgentLock(lockDir)
			if err != nil {
				t.Fatal(err)
			}
			l.SetState(drainer.AgentGuarding)
			defer l.Release()
		}
		person := strings.Contains(tt.config, "#person")
		env.NewDrainer = func() *drainer.Drainer {
			return &drainer.Drainer{Stderr: errb, Getenv: func(string) string { return "" }, ConfigPath: cfg, KubeRoot: dir,
				Clock: clocktesting.NewFakeClock(env.Now()), LockDir: lockDir,
				Automated: func() (bool, string) { return !person, "no terminal on stdin and stderr" }}
		}
		if code := Run(context.Background(), append([]string{"gnsh", "plan", "--output", "json"}, tt.args...), env); code != 0 && !(refused && code == 1) {
			t.Fatalf("%v: exit %d: %s", tt.args, code, errb)
		}
		var p handoff.Plan
		if err := json.Unmarshal(out.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		for _, w := range tt.want {
			if !strings.Contains(p.Drain, w) {
				t.Errorf("%q %v: drain %q\nlacks %q", tt.config, tt.args, p.Drain, w)
			}
		}
		if tt.not != "" && strings.Contains(p.Drain, tt.not) {
			t.Errorf("%q %v: drain %q has %q", tt.config, tt.args, p.Drain, tt.not)
		}
	}
}

// gnsh plan's text form for a command the drain refuses: what happens to
// /run/systemd/reboot-param is said as the command does it (removed while
// the command line is read, as systemd does, then put back as it was), not
// listed as a call after "exit 1 before any call" (issue 19); the refusal
// is a row.
func TestPlanTextRefused(t *testing.T) {
	env, out, errb := testEnv(t)
	cfg := writeFile(t, t.TempDir(), "config.yaml", "slots: {maxUnavalable: 2}\n")
	env.LookupEnv = func(k string) (string, bool) { return map[string]string{"COLUMNS": "400"}[k], k == "COLUMNS" }
	env.NewDrainer = func() *drainer.Drainer {
		return &drainer.Drainer{Stderr: errb, Getenv: func(string) string { return "" }, ConfigPath: cfg, KubeRoot: t.TempDir()}
	}
	code := Run(context.Background(), []string{"gnsh", "plan", "reboot"}, env)
	want := "action     reboot now\n" +
		"parameter  /run/systemd/reboot-param removed while the command line is read (as systemd does), then put back as it was: the command is refused\n" +
		"drain      refuse: " + cfg + ": line 1: slots.maxUnavalable: unknown key; did you mean maxUnavailable? (exit 1 before any call to logind; --no-drain skips the drain)\n" +
		"says       gnsh: " + cfg + ": line 1: slots.maxUnavalable: unknown key; did you mean maxUnavailable?\n" +
		"           gnsh: nothing was shut down; fix the file, or run the command again with --no-drain\n" +
		"exit       1; nothing was done (-o json lists every call)\n"
	if code != 1 || out.String() != want || errb.String() != "" {
		t.Errorf("exit %d, stderr %q:\n%s\nwant:\n%s", code, errb, out, want)
	}
}

// With several problems, plan's drain row says how many; each is a line of
// the says row, said once.
func TestPlanTextRefusedManyProblems(t *testing.T) {
	env, out, errb := testEnv(t)
	cfg := writeFile(t, t.TempDir(), "config.yaml", "drainTimeout: soon\nslots: {gate: maybe}\n")
	env.NewDrainer = func() *drainer.Drainer {
		return &drainer.Drainer{Stderr: errb, Getenv: func(string) string { return "" }, ConfigPath: cfg, KubeRoot: t.TempDir()}
	}
	code := Run(context.Background(), []string{"gnsh", "plan", "reboot"}, env)
	if code != 1 || strings.Count(out.String(), `"maybe" is not a gate mode`) != 1 ||
		!strings.Contains(strings.Join(strings.Fields(out.String()), " "), "drain refuse: "+cfg+" is invalid (2 problems, each a line of the command's message)") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}
