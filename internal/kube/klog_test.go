package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// klogHelper makes client-go log: a response body cut short makes
// rest.Request log "Unexpected error when reading response body" at error
// level; then client-go's default warning handler, apimachinery's
// HandleError and klog itself are called. mode says how klog was set up
// first: "plain" (untouched), "output" (SetOutput(io.Discard) and
// LogToStderr(false)), "kube" (a client from Locator.RESTConfig).
func klogHelper(mode string) error {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"kind":"No`))
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler) // cut the body short
	}))
	defer srv.Close()

	var c kubernetes.Interface
	switch mode {
	case "plain", "output":
		if mode == "output" {
			klog.SetOutput(io.Discard)
			klog.LogToStderr(false)
		}
		cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
		var err error
		if c, err = kubernetes.NewForConfig(cfg); err != nil {
			return err
		}
	case "kube":
		dir, err := os.MkdirTemp("", "gnsh-klog")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "kubeconfig")
		if err := os.WriteFile(path, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, srv.URL)), 0o600); err != nil {
			return err
		}
		cfg, err := (&Locator{}).RESTConfig(path)
		if err != nil {
			return err
		}
		if c, err = kubernetes.NewForConfig(cfg); err != nil {
			return err
		}
	default:
		return fmt.Errorf("mode %q", mode)
	}
	if _, err := c.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{}); err == nil {
		return errors.New("a cut-short body gave no error")
	}
	// What else client-go and apimachinery print through.
	rest.WarningLogger{}.HandleWarningHeaderWithContext(context.Background(), 299, "", "default warning handler")
	utilruntime.HandleError(errors.New("utilruntime.HandleError"))
	klog.Error("klog.Error")
	klog.Warning("klog.Warning")
	klog.InfoS("klog.InfoS")
	klog.Background().Error(nil, "klog.Background().Error")
	klog.Flush()
	return nil
}

func TestKlogSilenced(t *testing.T) {
	_, plain := runHelper(t, os.Args[0], "klog-plain", 0)
	for _, want := range []string{"Unexpected error when reading response body", "Warning: default warning handler", "klog.Error"} {
		if !strings.Contains(plain, want) {
			t.Errorf("untouched klog: %q not on stderr (is the test still triggering it?):\n%s", want, plain)
		}
	}
	_, output := runHelper(t, os.Args[0], "klog-output", 0)
	t.Logf("SetOutput(io.Discard) + LogToStderr(false) still prints:\n%s", output)
	if _, quiet := runHelper(t, os.Args[0], "klog-kube", 0); quiet != "" {
		t.Errorf("after Locator.RESTConfig, stderr has:\n%s", quiet)
	}
}
