package controlplane

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The kubelet set: kubelet says the version the control plane runs, and
// fakecri serves on the socket it is given.
func TestKubeletBin(t *testing.T) {
	bin := KubeletBin(t)
	out, err := exec.Command(filepath.Join(bin, "kubelet"), "--version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "Kubernetes v1.37.1" {
		t.Fatalf("kubelet --version: %q, %v", out, err)
	}
	sock := filepath.Join(t.TempDir(), "cri", "fakecri.sock")
	cmd := exec.Command(filepath.Join(bin, "fakecri"), "--socket", sock)
	var log strings.Builder
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if fi, err := os.Stat(sock); err == nil && fi.Mode()&os.ModeSocket != 0 {
			break
		}
		if i == 100 {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("fakecri made no socket at %s: %s", sock, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("fakecri on SIGTERM: %v: %s", err, log.String())
	}
	if !strings.Contains(log.String(), "fakecri: serving on "+sock) {
		t.Fatalf("fakecri log: %q", log.String())
	}
}
