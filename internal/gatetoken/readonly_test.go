package gatetoken

import (
	"context"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gnsh/gnsh/internal/gatetoken/claims/claimstest"
)

// A kubeconfig the agent may not write (gnsh.service's ProtectSystem=strict
// leaves only /run/gnsh and /etc/gnsh writable: slots.kubeconfig elsewhere
// needs a drop-in) is said at once, in one line naming the file, the unit
// and the drop-in that fixes it, not "re-run the playbook" (a new token
// would fail the same way), even while the token has more than half its
// life left (when an API server that does not answer is not said yet).
func TestReadOnlyKubeconfigNamesTheDropIn(t *testing.T) {
	start := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	clock := clocktesting.NewFakeClock(start)
	s := newTokenServer(clock)
	dir := t.TempDir()
	p := writeKubeconfig(t, dir, claimstest.Token("n1", start.Add(-9*time.Hour), 24*time.Hour))
	r, said, _ := newRenewer(t, p, s)
	// What os.CreateTemp returns beside the kubeconfig on a read-only
	// mount (the fake server stands in for the write: a root test cannot
	// make a directory read-only).
	s.fail = &fs.PathError{Op: "open", Path: filepath.Join(dir, ".kubeconfig.123"), Err: syscall.EROFS}
	for range 5 {
		r.Once(context.Background())
		clock.Step(time.Minute)
	}
	want := "gnsh: the gate's token in " + p + " (node n1) expires in 15h and cannot be renewed: " + dir +
		" is read-only for gnsh.service; let it write there with a drop-in (`systemctl edit gnsh`: [Service] ReadWritePaths=" + dir + ") and restart it"
	if len(*said) != 1 || (*said)[0] != want {
		t.Fatalf("said %q, want once %q", *said, want)
	}
	if strings.Contains((*said)[0], "\n") {
		t.Fatal("two lines")
	}
}
