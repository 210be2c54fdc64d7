package gnshcli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/slots"
)

// slotsServer is an API server with the Lease gnsh/reboot-slots (none if
// lease is nil) and no Node, and a kubeconfig for it.
func slotsServer(t *testing.T, lease *coordinationv1.Lease) (url, kubeconfig string) {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/apis/coordination.k8s.io/v1/namespaces/gnsh/leases/reboot-slots" && lease != nil:
			_ = json.NewEncoder(w).Encode(lease)
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes":
			_ = json.NewEncoder(w).Encode(&corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"}})
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, writeKubeconfig(t, filepath.Join(t.TempDir(), "kubeconfig"), srv.URL)
}

func writeKubeconfig(t *testing.T, path, url string) string {
	t.Helper()
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: t}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`, url)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// slotsEnv is testEnv with the environment vars, no config file (the
// defaults), and gnsh's and the kubelet's kubeconfigs looked for in an
// empty tree.
func slotsEnv(t *testing.T, vars map[string]string) *bytesEnv {
	env, out, errb := testEnv(t)
	vars["GNSH_CONFIG"] = filepath.Join(t.TempDir(), "absent.yaml")
	env.LookupEnv = func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	root := t.TempDir()
	env.NewDrainer = func() *drainer.Drainer {
		return &drainer.Drainer{Stderr: errb, Getenv: func(k string) string { return vars[k] }, KubeRoot: root}
	}
	return &bytesEnv{env: env, out: out, errb: errb}
}

// With no Lease yet, the JSON has empty lists, never null.
func TestSlotsJSONEmptyLists(t *testing.T) {
	_, kc := slotsServer(t, nil)
	for _, lease := range []*coordinationv1.Lease{nil, {ObjectMeta: metav1.ObjectMeta{Namespace: "gnsh", Name: "reboot-slots",
		Annotations: map[string]string{slots.Annotation: `{"version":1,"next":4,"holders":null,"waiters":null}`}}}} {
		if lease != nil {
			_, kc = slotsServer(t, lease)
		}
		e := slotsEnv(t, map[string]string{"HOME": t.TempDir()})
		if code := Run(context.Background(), []string{"gnsh", "slots", "--kubeconfig", kc, "-o", "json"}, e.env); code != 0 {
			t.Fatalf("exit %d: %s", code, e.errb)
		}
		var raw map[string]any
		if err := json.Unmarshal(e.out.Bytes(), &raw); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"holders", "waiters", "out", "pools"} {
			if l, ok := raw[k].([]any); !ok || len(l) != 0 {
				t.Errorf("Lease %v: %s is %#v, want []:\n%s", lease != nil, k, raw[k], e.out)
			}
		}
		if _, ok := raw["outError"]; ok {
			t.Errorf("outError without an error: %s", e.out)
		}
	}
}

// Text from the Lease (any node's token writes it) reaches the terminal
// escaped: no escape sequence, carriage return, tab or bidi override.
func TestSlotsEscapesLeaseText(t *testing.T) {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "gnsh", Name: "reboot-slots", ResourceVersion: "7"}}
	since := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	slots.Record{Version: slots.Schema, Next: 2, Holders: []slots.Entry{{Node: "node\r1", Phase: "draining\x1b[2J", Action: "reboot\t",
		Who: "\x1b]0;pwned\x07root\u202eon pts/0", Since: since, Ticket: 0, Renew: 10}},
		Waiters: []slots.Entry{{Node: "w\u009b1", Action: "reboot", Who: "bob", Since: since, Ticket: 1, Renew: 10}}}.Encode(l)
	_, kc := slotsServer(t, l)
	e := slotsEnv(t, map[string]string{"HOME": t.TempDir()})
	if code := Run(context.Background(), []string{"gnsh", "slots", "--kubeconfig", kc}, e.env); code != 0 {
		t.Fatalf("exit %d: %s", code, e.errb)
	}
	got := e.out.String()
	for _, bad := range []string{"\x1b", "\r", "\x07", "\u202e", "\u009b", "\xff", "reboot\t"} {
		if strings.Contains(got, bad) {
			t.Errorf("output has %q raw:\n%q", bad, got)
		}
	}
	for _, want := range []string{`node\x0d1`, `draining\x1b[2J`, `reboot\x09 by \x1b]0;pwned\x07root\u202eon pts/0`, `w\x9b1`} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %s:\n%s", want, got)
		}
	}
	// JSON escapes them already, and keeps the text as it is.
	e = slotsEnv(t, map[string]string{"HOME": t.TempDir()})
	if code := Run(context.Background(), []string{"gnsh", "slots", "--kubeconfig", kc, "-o", "json"}, e.env); code != 0 || strings.Contains(e.out.String(), "\x1b") {
		t.Fatalf("json: exit %d: %q", code, e.out)
	}
}

func TestTermSafe(t *testing.T) {
	for in, want := range map[string]string{
		"node-1":                "node-1",
		"ünïcödé 節点":            "ünïcödé 節点",
		"a\x1b[31mb":            `a\x1b[31mb`,
		"a\nb\tc\x7f":           `a\x0ab\x09c\x7f`,
		"\u202eevil\u2066":      `\u202eevil\u2066`,
		"bad\xffutf8\xc3":       `bad\xffutf8\xc3`,
		"c1\u0085\u009b":        `c1\x85\x9b`,
		"replacement \ufffd ok": "replacement \ufffd ok",
	} {
		if got := termSafe(in); got != want {
			t.Errorf("termSafe(%q) = %q, want %q", in, got, want)
		}
	}
}

// gnsh slots finds an admin's kubeconfig as kubectl does: $KUBECONFIG,
// then ~/.kube/config (before gnsh's and the kubelet's), only if it is
// this user's or root's; with none, one line naming --kubeconfig and
// $KUBECONFIG.
func TestSlotsAdminKubeconfig(t *testing.T) {
	home := t.TempDir()
	url, _ := slotsServer(t, nil)
	mine := writeKubeconfig(t, filepath.Join(home, ".kube", "config"), url)

	// ~/.kube/config is found.
	e := slotsEnv(t, map[string]string{"HOME": home})
	if code := Run(context.Background(), []string{"gnsh", "slots"}, e.env); code != 0 || !strings.Contains(e.out.String(), "no slot held") {
		t.Fatalf("~/.kube/config: exit %d %q\n%s", code, e.errb, e.out)
	}

	// $KUBECONFIG comes first: one that does not answer is used.
	dead := writeKubeconfig(t, filepath.Join(t.TempDir(), "dead"), "https://127.0.0.1:1")
	e = slotsEnv(t, map[string]string{"HOME": home, "KUBECONFIG": dead})
	if code := Run(context.Background(), []string{"gnsh", "slots"}, e.env); code != 1 || !strings.Contains(e.errb.String(), "127.0.0.1:1") {
		t.Fatalf("$KUBECONFIG: exit %d %q", code, e.errb)
	}

	// The config file's kubeconfig key (the node's own identity) comes
	// after an admin's: $KUBECONFIG, then ~/.kube/config. The one used is
	// named on stderr.
	good := writeKubeconfig(t, filepath.Join(t.TempDir(), "admin"), url)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("kubeconfig: "+dead+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, vars := range []map[string]string{{"HOME": t.TempDir(), "KUBECONFIG": good}, {"HOME": home}} {
		e = slotsEnv(t, vars)
		vars["GNSH_CONFIG"] = cfg
		want := good
		if vars["KUBECONFIG"] == "" {
			want = mine
		}
		if code := Run(context.Background(), []string{"gnsh", "slots"}, e.env); code != 0 || !strings.Contains(e.errb.String(), "gnsh: using the kubeconfig "+want+"\n") {
			t.Errorf("config key %s, %v: exit %d %q", dead, vars, code, e.errb)
		}
	}

	// Another user's file (or a symlink another user made) is not used.
	other := t.TempDir()
	theirs := writeKubeconfig(t, filepath.Join(other, ".kube", "config"), url)
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Skipf("chown: %v", err)
	}
	e = slotsEnv(t, map[string]string{"HOME": other})
	code := Run(context.Background(), []string{"gnsh", "slots"}, e.env)
	msg := e.errb.String()
	if code != 1 || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "no kubeconfig found ($KUBECONFIG, ~/.kube/config, ") ||
		!strings.Contains(msg, theirs+" not used: it belongs to uid 65534") || !strings.Contains(msg, "pass --kubeconfig FILE or set $KUBECONFIG") {
		t.Errorf("another user's: exit %d %q", code, msg)
	}
	link := t.TempDir()
	if err := os.MkdirAll(filepath.Join(link, ".kube"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(mine, filepath.Join(link, ".kube", "config")); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(filepath.Join(link, ".kube", "config"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	e = slotsEnv(t, map[string]string{"HOME": link})
	if code := Run(context.Background(), []string{"gnsh", "slots", "release", "--node", "n1"}, e.env); code != 1 || !strings.Contains(e.errb.String(), "not used: it belongs to uid 65534") {
		t.Errorf("another user's symlink: exit %d %q", code, e.errb)
	}

	// None at all: one line.
	e = slotsEnv(t, map[string]string{"HOME": t.TempDir()})
	if code := Run(context.Background(), []string{"gnsh", "slots"}, e.env); code != 1 ||
		!strings.HasPrefix(e.errb.String(), "gnsh: no kubeconfig found ($KUBECONFIG, ~/.kube/config, kubeconfig in the config file, /etc/gnsh/kubeconfig, /etc/kubernetes/kubelet.conf, /var/lib/rancher/k3s/agent/kubelet.kubeconfig, /var/lib/rancher/rke2/agent/kubelet.kubeconfig): pass --kubeconfig FILE or set $KUBECONFIG to an admin's kubeconfig\n") ||
		strings.Count(e.errb.String(), "\n") != 1 {
		t.Errorf("none: exit %d %q", code, e.errb)
	}
}

// gnsh slots marks a queued waiter (its node agent carries the request)
// and names the window queued reboots wait for.
func TestWriteSlotsQueued(t *testing.T) {
	var b strings.Builder
	writeSlots(&b, slotsView{Lease: "gnsh/reboot-slots", Gate: "optional", MaxUnavailable: 1, Window: "mon-fri 02:00-05:00 UTC",
		Waiters: []slots.Entry{{Node: "n1", Action: "reboot", Who: "root", Queued: true}, {Node: "n2", Action: "reboot", Who: "alice on pts/0"}}})
	for _, w := range []string{"limit 1; queued reboots within mon-fri 02:00-05:00 UTC\n", "place 1, queued", "place 2  "} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("%s\nlacks %q", b.String(), w)
		}
	}
}
