package gatetoken

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gnsh/gnsh/internal/gatetoken/claims/claimstest"
)

func TestRenewAfter(t *testing.T) {
	for _, c := range []struct{ life, every, want time.Duration }{
		{24 * time.Hour, 0, time.Hour},
		{24 * time.Hour, 2 * time.Hour, 2 * time.Hour},
		{time.Hour, 0, 20 * time.Minute},
		{10 * time.Minute, time.Hour, 200 * time.Second},
	} {
		if got := RenewAfter(c.life, c.every); got != c.want {
			t.Errorf("RenewAfter(%v, %v) = %v, want %v", c.life, c.every, got, c.want)
		}
	}
}

func TestHuman(t *testing.T) {
	for d, want := range map[time.Duration]string{40 * time.Second: "40s", 25 * time.Minute: "25m", 3*time.Hour + 20*time.Minute: "3h20m",
		3 * time.Hour: "3h", 26*time.Hour + 10*time.Minute: "26h"} {
		if got := Human(d); got != want {
			t.Errorf("Human(%v) = %q, want %q", d, got, want)
		}
	}
}

const kubeconfigText = `# managed by Ansible
apiVersion: v1
kind: Config
clusters:
- name: default
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: Q0EK
users:
- name: gnsh
  user:
    token: TOKEN
contexts:
- name: default
  context:
    cluster: default
    user: gnsh
    namespace: extra
current-context: default
preferences: {}
`

func writeKubeconfig(t *testing.T, dir, token string) string {
	t.Helper()
	p := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(p, []byte(strings.Replace(kubeconfigText, "TOKEN", token, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSaveKeepsFieldsAndMode(t *testing.T) {
	dir := t.TempDir()
	p := writeKubeconfig(t, dir, "old")
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	k, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if k.Token() != "old" {
		t.Fatalf("token %q", k.Token())
	}
	if err := k.SetToken("new"); err != nil {
		t.Fatal(err)
	}
	if err := k.Save(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	raw, err := clientcmd.LoadFromFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if u := raw.AuthInfos["gnsh"]; u == nil || u.Token != "new" {
		t.Fatalf("user %+v", raw.AuthInfos["gnsh"])
	}
	cl := raw.Clusters["default"]
	if cl == nil || cl.Server != "https://10.0.0.1:6443" || string(cl.CertificateAuthorityData) != "CA\n" || raw.Contexts["default"].Namespace != "extra" || raw.CurrentContext != "default" {
		t.Fatalf("fields changed: %+v %+v", cl, raw.Contexts["default"])
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestSymlinkRefused(t *testing.T) {
	dir := t.TempDir()
	real := writeKubeconfig(t, dir, "old")
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	var se *SymlinkError
	if _, err := Load(link); !errors.As(err, &se) {
		t.Fatalf("Load through a symlink: %v", err)
	}
	k, err := Load(real)
	if err != nil {
		t.Fatal(err)
	}
	k.Path = link
	if err := k.Save(); !errors.As(err, &se) {
		t.Fatalf("Save over a symlink: %v", err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v", err)
	}
	if !strings.HasPrefix(se.Error(), link+" is a symbolic link") {
		t.Errorf("message %q", se.Error())
	}
}

// tokenServer is a fake clientset answering TokenRequests with tokens
// issued at the fake clock's now, or with fail.
type tokenServer struct {
	cs    *fake.Clientset
	clock *clocktesting.FakeClock
	fail  error
	asked []*authenticationv1.TokenRequest
}

func newTokenServer(clock *clocktesting.FakeClock) *tokenServer {
	s := &tokenServer{cs: fake.NewClientset(), clock: clock}
	s.cs.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest)
		s.asked = append(s.asked, tr.DeepCopy())
		if s.fail != nil {
			return true, nil, s.fail
		}
		out := tr.DeepCopy()
		out.Status.Token = claimstest.Token(tr.Spec.BoundObjectRef.Name, s.clock.Now(), time.Duration(*tr.Spec.ExpirationSeconds)*time.Second)
		return true, out, nil
	})
	return s
}

func newRenewer(t *testing.T, path string, s *tokenServer) (*Renewer, *[]string, *State) {
	var said []string
	var st State
	r := &Renewer{Path: path, Clock: s.clock,
		Client: func(*Kubeconfig) (kubernetes.Interface, error) { return s.cs, nil },
		Jitter: func(max time.Duration) time.Duration { return max / 2 },
		Say:    func(l string) { said = append(said, l) },
		Record: func(x State) { st = x },
	}
	return r, &said, &st
}

func tokenIn(t *testing.T, path string) Claims {
	t.Helper()
	k, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseClaims(k.Token())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRenewSchedule(t *testing.T) {
	start := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	clock := clocktesting.NewFakeClock(start)
	s := newTokenServer(clock)
	p := writeKubeconfig(t, t.TempDir(), claimstest.Token("n1", start.Add(-2*time.Minute), 24*time.Hour))
	r, said, st := newRenewer(t, p, s)
	ctx := context.Background()

	// At start: renewed at once, same life, same Node (name and UID).
	r.Once(ctx)
	if len(s.asked) != 1 {
		t.Fatalf("%d requests at start, want 1", len(s.asked))
	}
	spec := s.asked[0].Spec
	if *spec.ExpirationSeconds != 24*3600 || spec.BoundObjectRef == nil || spec.BoundObjectRef.Kind != "Node" ||
		spec.BoundObjectRef.APIVersion != "v1" || spec.BoundObjectRef.Name != "n1" || spec.BoundObjectRef.UID != "uid-n1" {
		t.Fatalf("request %+v %+v", spec, spec.BoundObjectRef)
	}
	if c := tokenIn(t, p); !c.IssuedAt.Equal(start) || !c.Expiry.Equal(start.Add(24*time.Hour)) {
		t.Fatalf("file's token %+v", c)
	}
	if st.Renewed != start || st.Node != "n1" || st.Error != "" {
		t.Fatalf("state %+v", st)
	}
	if len(*said) != 0 {
		t.Fatalf("said %q on a routine renewal", *said)
	}
	// Not again before an hour less the jitter (half its bound of 6m).
	due := start.Add(time.Hour - 3*time.Minute)
	for clock.Now().Add(time.Minute).Before(due) {
		clock.Step(time.Minute)
		r.Once(ctx)
	}
	if len(s.asked) != 1 {
		t.Fatalf("renewed %d times before it was due", len(s.asked)-1)
	}
	clock.SetTime(due)
	r.Once(ctx)
	if len(s.asked) != 2 {
		t.Fatalf("not renewed when due (%d requests)", len(s.asked))
	}
}

func TestJitterBounds(t *testing.T) {
	start := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	clock := clocktesting.NewFakeClock(start)
	s := newTokenServer(clock)
	p := writeKubeconfig(t, t.TempDir(), claimstest.Token("n1", start, 30*time.Minute))
	r, _, _ := newRenewer(t, p, s)
	var asked time.Duration
	r.Jitter = func(max time.Duration) time.Duration { asked = max; return max - 1 }
	r.started = true
	r.Once(context.Background())
	// A third of 30m is 10m; the jitter is drawn below a tenth of it.
	if asked != time.Minute {
		t.Fatalf("jitter bound %v, want 1m", asked)
	}
	if len(s.asked) != 0 {
		t.Fatal("renewed at once")
	}
	clock.SetTime(start.Add(9*time.Minute + time.Second))
	r.Once(context.Background())
	if len(s.asked) != 1 {
		t.Fatalf("not renewed at 9m1s (10m less a jitter of just under 1m): %d", len(s.asked))
	}
	if *s.asked[0].Spec.ExpirationSeconds != 1800 {
		t.Fatalf("asked for %ds", *s.asked[0].Spec.ExpirationSeconds)
	}
}

func TestFailureSaidOnce(t *testing.T) {
	start := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	clock := clocktesting.NewFakeClock(start)
	s := newTokenServer(clock)
	p := writeKubeconfig(t, t.TempDir(), claimstest.Token("n1", start.Add(-21*time.Hour), 24*time.Hour))
	r, said, st := newRenewer(t, p, s)
	ctx := context.Background()
	s.fail = apierrors.NewUnauthorized("Unauthorized")
	for range 30 {
		r.Once(ctx)
		clock.Step(time.Minute)
	}
	if len(*said) != 1 {
		t.Fatalf("said %d lines, want 1: %q", len(*said), *said)
	}
	want := "gnsh: the gate's token in " + p + " (node n1) expires in 3h and cannot be renewed (the API server refuses the token: 401 Unauthorized"
	if !strings.HasPrefix((*said)[0], want) || !strings.HasSuffix((*said)[0], "re-run the playbook or `gnsh token install`") {
		t.Fatalf("line %q", (*said)[0])
	}
	if st.Error == "" || !st.Since.Equal(start) {
		t.Fatalf("state %+v", st)
	}
	// Backoff: 30 minutes of failures are not 30 requests.
	if n := len(s.asked); n >= 10 || n < 3 {
		t.Fatalf("%d requests in 30 minutes of failures", n)
	}
	// Another failure is said once more.
	s.fail = apierrors.NewForbidden(schema.GroupResource{Resource: "serviceaccounts"}, "gnsh", errors.New("no"))
	clock.Step(MaxRetry)
	r.Once(ctx)
	r.Once(ctx)
	if len(*said) != 2 || !strings.Contains((*said)[1], "403 Forbidden") {
		t.Fatalf("said %q", *said)
	}
	// Renewed again: said once.
	s.fail = nil
	clock.Step(MaxRetry)
	r.Once(ctx)
	if len(*said) != 3 || !strings.Contains((*said)[2], "is renewed again: node n1") {
		t.Fatalf("said %q", *said)
	}
	if st.Error != "" || !st.Since.IsZero() {
		t.Fatalf("state after recovery %+v", st)
	}
}

func TestUnboundNotRenewed(t *testing.T) {
	start := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	clock := clocktesting.NewFakeClock(start)
	s := newTokenServer(clock)
	p := writeKubeconfig(t, t.TempDir(), claimstest.Token("", start.Add(-time.Hour), 8760*time.Hour))
	r, said, st := newRenewer(t, p, s)
	for range 3 {
		r.Once(context.Background())
		clock.Step(time.Hour)
	}
	if len(s.asked) != 0 {
		t.Fatal("asked to renew an unbound token")
	}
	if len(*said) != 1 || !strings.Contains((*said)[0], "is not bound to a Node, so the agent cannot renew it") {
		t.Fatalf("said %q", *said)
	}
	if st.Error != "is not bound to a Node" {
		t.Fatalf("state %+v", st)
	}
}

func TestAbsentFileIdle(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Now())
	s := newTokenServer(clock)
	r, said, st := newRenewer(t, filepath.Join(t.TempDir(), "kubeconfig"), s)
	if w := r.Once(context.Background()); w != DefaultPoll {
		t.Fatalf("wait %v", w)
	}
	if len(*said) != 0 || st.Idle == "" || st.Error != "" {
		t.Fatalf("said %q state %+v", *said, st)
	}
}

func TestChangedMeanwhileNotOverwritten(t *testing.T) {
	start := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	clock := clocktesting.NewFakeClock(start)
	s := newTokenServer(clock)
	p := writeKubeconfig(t, t.TempDir(), claimstest.Token("n1", start.Add(-2*time.Hour), 24*time.Hour))
	r, _, _ := newRenewer(t, p, s)
	installed := claimstest.Token("n1", start, 12*time.Hour)
	s.cs.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		writeKubeconfig(t, filepath.Dir(p), installed) // gnsh token install, meanwhile
		return false, nil, nil
	})
	r.Once(context.Background())
	k, _ := Load(p)
	if k.Token() != installed {
		t.Fatal("a token installed during the renewal was overwritten")
	}
}

// A node-bound token issued for longer than a renewal may ask (the policy's
// 48 hours) is renewed for 48 hours.
func TestLongLivedBoundRenewedShorter(t *testing.T) {
	start := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	clock := clocktesting.NewFakeClock(start)
	s := newTokenServer(clock)
	p := writeKubeconfig(t, t.TempDir(), claimstest.Token("n1", start.Add(-2*time.Hour), 8760*time.Hour))
	r, said, _ := newRenewer(t, p, s)
	r.Once(context.Background())
	if len(s.asked) != 1 || *s.asked[0].Spec.ExpirationSeconds != int64(MaxLife/time.Second) || len(*said) != 0 {
		t.Fatalf("asked %d, said %q", len(s.asked), *said)
	}
	if c := tokenIn(t, p); c.Life() != MaxLife {
		t.Fatalf("renewed for %v", c.Life())
	}
}

// An API server that does not answer (a control-plane node's own, still
// starting after boot) is said only once the token has lost half its
// life; a refusal is said at once.
func TestUnreachableSaidLate(t *testing.T) {
	start := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	clock := clocktesting.NewFakeClock(start)
	s := newTokenServer(clock)
	p := writeKubeconfig(t, t.TempDir(), claimstest.Token("n1", start.Add(-time.Hour), 24*time.Hour))
	r, said, st := newRenewer(t, p, s)
	s.fail = errors.New("dial tcp 10.0.0.1:6443: connect: connection refused")
	for clock.Now().Before(start.Add(10 * time.Hour)) {
		r.Once(context.Background())
		clock.Step(time.Minute)
	}
	if len(*said) != 0 || st.Error == "" {
		t.Fatalf("said %q (state %+v) with 13h of 24h left", *said, st)
	}
	for clock.Now().Before(start.Add(13 * time.Hour)) {
		r.Once(context.Background())
		clock.Step(time.Minute)
	}
	if len(*said) != 1 || !strings.Contains((*said)[0], "expires in 12h") || !strings.Contains((*said)[0], "connection refused") {
		t.Fatalf("said %q", *said)
	}
	s.fail = nil
	clock.Step(MaxRetry)
	r.Once(context.Background())
	if len(*said) != 2 || !strings.Contains((*said)[1], "renewed again") {
		t.Fatalf("said %q", *said)
	}
	// A short failure, not said, is not followed by "renewed again".
	s.fail = errors.New("connection refused")
	clock.Step(2 * time.Hour)
	r.Once(context.Background())
	s.fail = nil
	clock.Step(MaxRetry)
	r.Once(context.Background())
	if len(*said) != 2 {
		t.Fatalf("said %q", *said)
	}
}
