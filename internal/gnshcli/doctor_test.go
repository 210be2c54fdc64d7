package gnshcli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gnsh/gnsh/internal/nodefacts"
)

// gnsh doctor's text fits the width: a long message goes on under the
// message column, the fix on its own "fix:" line; nothing is lost.
func TestWriteChecksWraps(t *testing.T) {
	long := strings.Repeat("InhibitDelayMaxSec is below kubelet's period, so pods are cut short; ", 9)
	long = strings.TrimSuffix(long, " ")
	fix := "write [Login] InhibitDelayMaxSec=66 to /etc/systemd/logind.conf.d/zz-gnsh-inhibit-delay.conf, then systemctl kill -s HUP systemd-logind"
	checks := []nodefacts.Check{
		{Name: "systemd", Verdict: nodefacts.OK, Message: "systemd 252: its legacy commands go through logind"},
		{Name: "InhibitDelayMaxSec", Verdict: nodefacts.Fail, Message: long, Fix: fix},
	}
	var b bytes.Buffer
	WriteChecks(&b, checks, 100)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	col := len("fail  InhibitDelayMaxSec  ")
	if lines[0] != "ok    systemd             systemd 252: its legacy commands go through logind" ||
		!strings.HasPrefix(lines[1], "fail  InhibitDelayMaxSec  InhibitDelayMaxSec is below") || len(lines) < 8 {
		t.Fatalf("layout:\n%s", b.String())
	}
	sawFix := false
	for _, l := range lines[2:] {
		if len([]rune(l)) > 100 {
			t.Errorf("%d columns: %q", len([]rune(l)), l)
		}
		if !strings.HasPrefix(l, strings.Repeat(" ", col)) {
			t.Errorf("not under the message column: %q", l)
		}
		if strings.HasPrefix(l[col:], "fix: ") {
			sawFix = true
		}
	}
	if !sawFix {
		t.Errorf("no fix line:\n%s", b.String())
	}
	got := unwrapChecks(b.String())
	if len(got) != 2 || got[1] != "fail  InhibitDelayMaxSec  "+long+"; fix: "+fix {
		t.Errorf("the wrapped text lost something:\n%q", got)
	}
}

func TestOutputWidth(t *testing.T) {
	env, _, _ := testEnv(t)
	if w := outputWidth(env); w != defaultWidth {
		t.Errorf("not a terminal: %d", w)
	}
	env.LookupEnv = func(k string) (string, bool) { return "132", k == "COLUMNS" }
	if w := outputWidth(env); w != 132 {
		t.Errorf("$COLUMNS 132: %d", w)
	}
}
