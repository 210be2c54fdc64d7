package gnshcli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gnsh/gnsh/internal/drain/draintest"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/gatetoken"
	"github.com/gnsh/gnsh/internal/gatetoken/claims/claimstest"
	"github.com/gnsh/gnsh/internal/signals"
)

// The node agent renews the gate's token at start (and keeps its state
// for gnsh status in the lock directory).
func TestAgentRenewsGateToken(t *testing.T) {
	env, errb := agentEnv(t, "unix:path=/nonexistent/system_bus_socket")
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "uid-1"}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	cs := draintest.New(n)
	root := t.TempDir()
	old := claimstest.Token("node-1", time.Now().Add(-2*time.Hour), 24*time.Hour)
	kc := gatetoken.New(filepath.Join(root, "etc/gnsh/kubeconfig"), "https://10.0.0.1:6443", []byte("CA"), old)
	if err := os.MkdirAll(filepath.Dir(kc.Path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := kc.Save(); err != nil {
		t.Fatal(err)
	}
	api := fake.NewClientset()
	asked := make(chan *authenticationv1.TokenRequest, 10)
	api.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		asked <- tr
		tr.Status.Token = claimstest.Token(tr.Spec.BoundObjectRef.Name, time.Now(), time.Duration(*tr.Spec.ExpirationSeconds)*time.Second)
		return true, tr, nil
	})
	gateTokenClient = func(*gatetoken.Kubeconfig) (kubernetes.Interface, error) { return api, nil }
	t.Cleanup(func() { gateTokenClient = nil })
	sig := signals.NewDetached(nil)
	lockDir := filepath.Join(t.TempDir(), "gnsh")
	env.NewDrainer = func() *drainer.Drainer {
		return &drainer.Drainer{Stderr: env.Stderr, Getenv: func(string) string { return "" }, Signal: sig,
			ConfigPath: filepath.Join(t.TempDir(), "none.yaml"), BootID: "this-boot", LockDir: lockDir, KubeRoot: root,
			Connect: func(context.Context) (kubernetes.Interface, string, error) { return cs, "node-1", nil }}
	}
	stop := startAgent(t, env, sig)
	select {
	case tr := <-asked:
		if tr.Spec.BoundObjectRef.Name != "node-1" || *tr.Spec.ExpirationSeconds != 24*3600 {
			t.Errorf("asked for %+v", tr.Spec)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the agent did not renew the token:\n%s", errb.String())
	}
	var st gatetoken.State
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		data, err := os.ReadFile(filepath.Join(lockDir, "gate-token.json"))
		if err == nil && json.Unmarshal(data, &st) == nil && !st.Renewed.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no state file: %v\n%s", err, errb.String())
		}
	}
	stop()
	k, err := gatetoken.Load(kc.Path)
	if err != nil {
		t.Fatal(err)
	}
	if k.Token() == old || st.Node != "node-1" || st.Error != "" {
		t.Fatalf("token not replaced, or state %+v", st)
	}
	if strings.Contains(errb.String(), "gate's token") {
		t.Errorf("a routine renewal was said:\n%s", errb.String())
	}
}
