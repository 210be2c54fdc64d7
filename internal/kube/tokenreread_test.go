package kube

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// A client built from a kubeconfig with an embedded token uses the token
// the file holds when it asks, not the one it was built with: the node
// agent renews the gate's token by replacing the file.
func TestEmbeddedTokenReadAgain(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1"}}`))
	}))
	defer srv.Close()
	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	dir := t.TempDir()
	p := filepath.Join(dir, "kubeconfig")
	write := func(token string) {
		tmp := p + ".new"
		data := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: " + srv.URL +
			"\n    certificate-authority-data: " + ca + "\nusers:\n- name: u\n  user:\n    token: " + token + "\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"
		if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, p); err != nil {
			t.Fatal(err)
		}
	}
	write("first")
	loc := &Locator{}
	rc, err := loc.RESTConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	get := func() {
		if _, err := c.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	get()
	write("second")
	get()
	get()
	// A file that is gone leaves the last token in use.
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	get()
	want := []string{"Bearer first", "Bearer second", "Bearer second", "Bearer second"}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != len(want) {
		t.Fatalf("requests %q, want %q", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("requests %q, want %q", seen, want)
		}
	}
}
