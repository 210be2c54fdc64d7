package controlplane

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// KubeletBin returns the directory holding the real kubelet and fakecri (a
// fake container runtime for it), built by "test/k8s/build.sh kubelet" (a set
// of its own, cached like the control plane's) or taken from
// $GNSH_KUBELET_BIN. Like Need, it skips t when they are missing and cannot
// be built in time, and fails instead under GNSH_REQUIRE_RIGS=1.
func KubeletBin(t testing.TB) string {
	t.Helper()
	bin, err := kubeletBin(t)
	if err != nil {
		if os.Getenv("GNSH_REQUIRE_RIGS") == "1" {
			t.Fatalf("kubelet: %v (GNSH_REQUIRE_RIGS=1)", err)
		}
		t.Skipf("kubelet: %v", err)
	}
	return bin
}

func kubeletBin(t testing.TB) (string, error) {
	if b := os.Getenv("GNSH_KUBELET_BIN"); b != "" {
		for _, f := range []string{"kubelet", "fakecri"} {
			if _, err := os.Stat(filepath.Join(b, f)); err != nil {
				return "", fmt.Errorf("GNSH_KUBELET_BIN: %v", err)
			}
		}
		return b, nil
	}
	dir, err := k8sDir()
	if err != nil {
		return "", err
	}
	for _, c := range []string{"go", "flock"} {
		if _, err := exec.LookPath(c); err != nil {
			return "", fmt.Errorf("needs %s (or GNSH_KUBELET_BIN)", c)
		}
	}
	build := filepath.Join(dir, "build.sh")
	if out, err := exec.Command(build, "kubelet", "--check").Output(); err == nil {
		return lastLine(out), nil
	}
	// Cold, the kubelet alone takes 5-7 minutes on 2 cores.
	if d, ok := deadline(t); ok && time.Until(d) < 12*time.Minute {
		return "", fmt.Errorf("kubelet not built and the test deadline is too close: run %s kubelet first", "test/k8s/build.sh")
	}
	t.Logf("building the kubelet and fakecri (cold: 5-7 min): %s kubelet", build)
	cmd := exec.Command(build, "kubelet")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("build.sh kubelet: %v\n%s", err, stderr.String())
	}
	return lastLine(out), nil
}
