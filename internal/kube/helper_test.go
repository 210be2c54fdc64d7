package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Some tests need a process of their own: klog is silenced process wide,
// and file permissions only bind a user other than root. They re-execute
// the test binary, which then runs TestHelperProcess only, in the mode
// named by $GNSH_KUBE_HELPER.
const helperEnv = "GNSH_KUBE_HELPER"

func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("helper for other tests")
	}
	var err error
	switch {
	case strings.HasPrefix(mode, "klog-"):
		err = klogHelper(strings.TrimPrefix(mode, "klog-"))
	case mode == "locate":
		err = locateHelper(os.Getenv("GNSH_KUBE_CASE"))
	default:
		err = fmt.Errorf("unknown helper mode %q", mode)
	}
	if err != nil {
		t.Fatal(err)
	}
	// On success the testing package adds "PASS" to stdout, and nothing to
	// stderr.
}

// helperResult is a child's answer, one JSON line on stdout.
type helperResult struct {
	FindPath, FindErr, FindKind string
	RESTErr, RESTKind, RESTPath string
}

// runHelper runs the test binary bin (os.Args[0], or a copy from
// userBinary) in mode; uid ≠ 0 runs it as that user and group. It returns
// stdout and stderr.
func runHelper(t *testing.T, bin, mode string, uid uint32, env ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^TestHelperProcess$")
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
		cmd.Dir = filepath.Dir(bin)
	}
	cmd.Env = append([]string{helperEnv + "=" + mode, "PATH=" + os.Getenv("PATH"), "HOME=/nonexistent"}, env...)
	var so, se strings.Builder
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Run(); err != nil {
		t.Fatalf("helper %s: %v\nstdout: %s\nstderr: %s", mode, err, so.String(), se.String())
	}
	return so.String(), se.String()
}

// userBinary copies the test binary where any user may run it (the go
// tool's build directory is root's alone).
func userBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(traversable(t), "kube.test")
	copyFile(t, os.Args[0], bin, 0o755)
	return bin
}

// traversable returns a new temporary directory that every user may
// search (t.TempDir makes 0700 directories).
func traversable(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// locateCase is a Locator for locateHelper.
type locateCase struct{ Kubeconfig, Root, KUBECONFIG string }

// locateHelper runs FindKubeconfig and RESTConfig for each Locator in
// casesJSON and prints what they returned, as a JSON array.
func locateHelper(casesJSON string) error {
	var cases []locateCase
	if err := json.Unmarshal([]byte(casesJSON), &cases); err != nil {
		return err
	}
	kind := func(err error) (string, string) {
		var ue *UnreadableError
		switch {
		case errors.As(err, &ue):
			return "unreadable", ue.Path
		case errors.Is(err, ErrNoKubeconfig):
			return "none", ""
		}
		return "other", ""
	}
	results := make([]helperResult, len(cases))
	for i, c := range cases {
		l := &Locator{Kubeconfig: c.Kubeconfig, Root: c.Root, Getenv: func(k string) string {
			if k == "KUBECONFIG" {
				return c.KUBECONFIG
			}
			return ""
		}}
		res := &results[i]
		path, err := l.FindKubeconfig()
		res.FindPath = path
		if err != nil {
			res.FindErr = err.Error()
			res.FindKind, res.FindPath = kind(err)
		} else if _, err := l.RESTConfig(path); err != nil {
			res.RESTErr = err.Error()
			res.RESTKind, res.RESTPath = kind(err)
		}
	}
	return json.NewEncoder(os.Stdout).Encode(results)
}
