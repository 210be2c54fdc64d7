package drain

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

// An answer cut off after its headers (a load balancer restarting
// mid-answer) is no answer. test/integration once saw an eviction the API
// server had accepted come back that way over HTTP/2; client-go wraps the
// stream reset in a plain error, which ended the drain ("cannot drain")
// instead of being retried like any other missing answer. Here real
// client-go talks to a server that resets each answer mid-body, over
// HTTP/2 and HTTP/1.1.
func TestAnswerCutOff(t *testing.T) {
	for _, tc := range []struct {
		proto string
		h2    bool
		want  string // in the error client-go returns
	}{
		{"HTTP/2.0", true, "stream error"},
		{"HTTP/1.1", false, "unexpected EOF"},
	} {
		t.Run(tc.proto, func(t *testing.T) {
			proto := make(chan string, 1)
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case proto <- r.Proto:
				default:
				}
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Length", "200")
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1",`))
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler) // reset the stream, or close the connection
			}))
			srv.EnableHTTP2 = tc.h2
			srv.StartTLS()
			t.Cleanup(srv.Close)
			ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
			c, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, QPS: -1, Timeout: 10 * time.Second,
				TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
			if err != nil {
				t.Fatal(err)
			}
			p := Classify(*pod("web-1"), false)
			o := newEvictor(c, nil).evict(context.Background(), &p)
			if got := <-proto; got != tc.proto {
				t.Fatalf("the eviction went over %s, want %s", got, tc.proto)
			}
			if o.err == nil || !strings.Contains(o.err.Error(), tc.want) {
				t.Fatalf("eviction error %v, want one saying %q", o.err, tc.want)
			}
			if !IsUnreachable(o.err) || !IsAPIFailure(o.err) {
				t.Errorf("IsUnreachable/IsAPIFailure(%v) = %v/%v, want true", o.err, IsUnreachable(o.err), IsAPIFailure(o.err))
			}
			if o.result != evictServerFailing || o.blocked == nil || o.blocked.Reason != "API server unreachable" {
				t.Errorf("outcome %d %+v, want evictServerFailing (retried, counted toward UnreachableAfter)", o.result, o.blocked)
			}
		})
	}
}

// An eviction whose answer is cut off once is retried; the drain ends
// with every pod gone, as if the answer had come.
func TestDrainEvictionAnswerCutOff(t *testing.T) {
	cl := newCluster(pod("web-1"), pod("web-2"))
	cut := fmt.Errorf("stream error when reading response body, may be caused by closed connection. Please retry. Original error: %w",
		http2.StreamError{StreamID: 13, Code: http2.ErrCodeInternal})
	var mu sync.Mutex
	tries := 0
	cl.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		mu.Lock()
		defer mu.Unlock()
		if tries++; tries == 1 {
			return true, nil, cut // not evicted, the answer lost
		}
		return false, nil, nil
	})
	d := fakeDrain(t, cl, Options{Node: "node1", Timeout: 5 * time.Minute}, 100*time.Millisecond, nil)
	if d.err != nil {
		t.Fatalf("drain: %v", d.err)
	}
	if s := d.res.Status; s.Gone != 2 || s.Evicted != 2 {
		t.Errorf("status %+v, want both pods evicted and gone", s)
	}
	mu.Lock()
	defer mu.Unlock()
	if tries != 3 {
		t.Errorf("%d eviction requests, want 3 (one retried)", tries)
	}
}
