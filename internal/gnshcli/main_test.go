package gnshcli

import (
	"os"
	"testing"

	"github.com/gnsh/gnsh/internal/kube"
)

// TestMain silences klog before any test starts an informer: a later
// test's first RESTConfig sets klog's logger, which must not happen while
// an earlier test's informer (a fake clientset's) still logs.
func TestMain(m *testing.M) {
	kube.SilenceKlog()
	os.Exit(m.Run())
}
