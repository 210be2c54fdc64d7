package gnshcli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/gnsh/gnsh/internal/slots"
)

// leaseServer is an API server with the Lease gnsh/reboot-slots whose
// record is raw: GET, PUT with a compare-and-swap on resourceVersion,
// Events posted in gnsh and default kept; no Node.
type leaseServer struct {
	mu     sync.Mutex
	lease  *coordinationv1.Lease
	events []corev1.Event
	puts   int
}

func newLeaseServer(t *testing.T, raw string) (*leaseServer, string) {
	t.Helper()
	s := &leaseServer{lease: &coordinationv1.Lease{
		TypeMeta:   metav1.TypeMeta{Kind: "Lease", APIVersion: "coordination.k8s.io/v1"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "gnsh", Name: "reboot-slots", UID: "lease-uid", ResourceVersion: "7", Annotations: map[string]string{slots.Annotation: raw}}}}
	const leasePath = "/apis/coordination.k8s.io/v1/namespaces/gnsh/leases/reboot-slots"
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == leasePath:
			_ = json.NewEncoder(w).Encode(s.lease)
		case r.Method == http.MethodPut && r.URL.Path == leasePath:
			var l coordinationv1.Lease
			if !decode(t, r, &l) {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			s.puts++
			if l.ResourceVersion != s.lease.ResourceVersion {
				w.WriteHeader(http.StatusConflict)
				fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409}`)
				return
			}
			rv, _ := strconv.Atoi(l.ResourceVersion)
			l.ResourceVersion = strconv.Itoa(rv + 1)
			l.TypeMeta = s.lease.TypeMeta
			s.lease = &l
			_ = json.NewEncoder(w).Encode(s.lease)
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/events"):
			var ev corev1.Event
			if !decode(t, r, &ev) {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			s.events = append(s.events, ev)
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(&ev)
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes":
			_ = json.NewEncoder(w).Encode(&corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"}})
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
		}
	}))
	t.Cleanup(srv.Close)
	return s, writeKubeconfig(t, filepath.Join(t.TempDir(), "kubeconfig"), srv.URL)
}

// decode reads a request's body as client-go sends it (protobuf or
// JSON).
func decode(t *testing.T, r *http.Request, into runtime.Object) bool {
	b, err := io.ReadAll(r.Body)
	if err == nil {
		_, _, err = scheme.Codecs.UniversalDeserializer().Decode(b, nil, into)
	}
	if err != nil {
		t.Errorf("%s %s: %v", r.Method, r.URL.Path, err)
	}
	return err == nil
}

func (s *leaseServer) record() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lease.Annotations[slots.Annotation]
}

// resetEnv is slotsEnv with events: true and carol as the sudo user.
func resetEnv(t *testing.T) *bytesEnv {
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("events: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"HOME": t.TempDir(), "SUDO_USER": "carol"}
	e := slotsEnv(t, vars)
	vars["GNSH_CONFIG"] = cfg
	return e
}

// A broken record: gnsh slots and gnsh slots release name the reset, in
// one line; gnsh slots reset starts a new record and posts GnshSlotsReset
// on the Lease naming who did and what was thrown away.
func TestSlotsResetBrokenRecord(t *testing.T) {
	raw := `{"version":1,"holders":[{"node":"a"`
	s, kc := newLeaseServer(t, raw)
	for _, args := range [][]string{{"slots"}, {"slots", "release", "--node", "a"}} {
		e := resetEnv(t)
		code := Run(context.Background(), append(append([]string{"gnsh"}, args...), "--kubeconfig", kc), e.env)
		msg := strings.TrimPrefix(e.errb.String(), "gnsh: using the kubeconfig "+kc+"\n")
		if code != 1 || strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "gnsh: the slots record in Lease gnsh/reboot-slots (annotation gnsh.io/slots) is not a valid record (") ||
			!strings.Contains(msg, "'gnsh slots reset' (admin credentials) starts a new one") || strings.Contains(msg, "delete lease") {
			t.Errorf("gnsh %s: exit %d %q", strings.Join(args, " "), code, msg)
		}
	}
	e := resetEnv(t)
	if code := Run(context.Background(), []string{"gnsh", "slots", "reset", "--kubeconfig", kc}, e.env); code != 0 {
		t.Fatalf("reset: exit %d %q", code, e.errb)
	}
	want := fmt.Sprintf("reset the slots record of gnsh/reboot-slots: every slot is free, nobody waits; thrown away: a record that could not be read (%d bytes): who held or waited for a slot is unknown\n", len(raw))
	if got := e.out.String(); got != want {
		t.Errorf("stdout %q\nwant   %q", got, want)
	}
	var rec slots.Record
	if err := json.Unmarshal([]byte(s.record()), &rec); err != nil || len(rec.Holders)+len(rec.Waiters) != 0 || rec.Version != slots.Schema {
		t.Errorf("record after the reset: %s %v", s.record(), err)
	}
	if len(s.events) != 1 {
		t.Fatalf("events: %+v", s.events)
	}
	ev := s.events[0]
	if ev.Reason != slots.ReasonReset || ev.Type != corev1.EventTypeWarning || ev.Namespace != "gnsh" || ev.InvolvedObject.Kind != "Lease" ||
		ev.InvolvedObject.Name != "reboot-slots" || ev.InvolvedObject.UID != "lease-uid" ||
		!strings.Contains(ev.Message, "reset by carol with 'gnsh slots reset': thrown away: a record that could not be read") {
		t.Errorf("event: %+v", ev)
	}
	// Now readable: gnsh slots lists it.
	e = resetEnv(t)
	if code := Run(context.Background(), []string{"gnsh", "slots", "--kubeconfig", kc}, e.env); code != 0 || !strings.Contains(e.out.String(), "no slot held") {
		t.Errorf("after: exit %d %q %s", code, e.errb, e.out)
	}
}

// A readable record is not reset without --force: one line, exit 1,
// nothing written; with --force every slot is freed and named.
func TestSlotsResetReadable(t *testing.T) {
	raw := `{"version":1,"next":3,"holders":[{"node":"a","uid":"ua","boot":"b","ticket":1,"phase":"draining","action":"reboot","who":"bob","since":"2026-11-27T11:00:00Z","beat":3,"renewSeconds":10}],"waiters":[]}`
	s, kc := newLeaseServer(t, raw)
	e := resetEnv(t)
	code := Run(context.Background(), []string{"gnsh", "slots", "reset", "--kubeconfig", kc}, e.env)
	msg := strings.TrimPrefix(e.errb.String(), "gnsh: using the kubeconfig "+kc+"\n")
	if code != 1 || msg != "gnsh: the slots record of gnsh/reboot-slots reads (1 holding a slot, 0 waiting): nothing reset; "+
		"'gnsh slots release --node NODE' frees one node's slot, 'gnsh slots reset --force' frees them all\n" || s.puts != 0 || s.record() != raw {
		t.Fatalf("without --force: exit %d %q, %d writes", code, msg, s.puts)
	}
	e = resetEnv(t)
	if code := Run(context.Background(), []string{"gnsh", "slots", "reset", "--force", "--kubeconfig", kc}, e.env); code != 0 ||
		!strings.Contains(e.out.String(), "thrown away: 1 holder(s) [a (draining, reboot by bob)], 0 waiter(s) []") {
		t.Fatalf("--force: exit %d %q %q", code, e.errb, e.out)
	}
}
