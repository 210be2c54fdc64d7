package drain

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// An API server that still accepts requests but stops answering them once
// the evictions are in (hung, overloaded, or a black-holed network): the
// drain must give up after about UnreachableAfter and a few request
// timeouts. client-go retries a watch that times out ten times, a second
// apart, and then returns an empty watch without an error; with those
// retries the drain below took about 25 s.
func TestDrainAPIServerHangs(t *testing.T) {
	var mu sync.Mutex
	hung := false
	release := make(chan struct{})
	pods := &corev1.PodList{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"},
		ListMeta: metav1.ListMeta{ResourceVersion: "7"},
		Items:    []corev1.Pod{*pod("web-1")},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		h := hung
		mu.Unlock()
		if h || r.URL.Query().Get("watch") == "true" {
			select { // never answer
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/pods":
			_ = json.NewEncoder(w).Encode(pods)
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/eviction"):
			mu.Lock()
			hung = true
			mu.Unlock()
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Success"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })

	c, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, Timeout: 300 * time.Millisecond, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	res, err := Drain(ctx, c, Options{Node: "node1", Timeout: 50 * time.Second, UnreachableAfter: 500 * time.Millisecond})
	took := time.Since(start)
	var ue *UnreachableError
	if !errors.As(err, &ue) {
		t.Fatalf("after %v: %v (%T), want *UnreachableError", took, err, err)
	}
	if res == nil || res.Status.Evicted != 1 {
		t.Errorf("result %+v", res)
	}
	// About 1 s to notice (a watch and a list time out), then a second
	// round; 8 s is generous, the retries took 25 s.
	if took > 8*time.Second {
		t.Fatalf("gave up after %v (UnreachableAfter 500ms, request timeout 300ms): %v", took, err)
	}
	t.Logf("gave up after %v: %v", took.Round(time.Millisecond), err)
}
