package gnshcli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gnsh/gnsh/internal/dispatch"
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
	code := Run(context.Background(), []string{"gnsh", "plan", "shutdown", "-r", "+5", "kernel", "update"}, env)
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

func TestPlanParseError(t *testing.T) {
	env, out, errb := testEnv(t)
	code := Run(context.Background(), []string{"gnsh", "plan", "halt", "now"}, env)
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
	if code := Run(context.Background(), []string{"gnsh", "plan", "reboot", "-f", "fw"}, env); code != 0 {
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
