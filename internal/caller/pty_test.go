package caller

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// answerEnv, set, makes the test binary a child that writes its Ask() to
// the file it names and exits: the command whose caller is told.
const answerEnv = "GNSH_CALLER_ANSWER"

func TestMain(m *testing.M) {
	if out := os.Getenv(answerEnv); out != "" {
		a := Ask()
		if err := os.WriteFile(out, []byte(fmt.Sprintf("%v %v %s", a.Person, a.Live, a.Reason)), 0o644); err != nil {
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// openPTY opens a new pseudo-terminal: its master and its follower.
func openPTY(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

// underPTY runs argv as the leader of a new session on a new
// pseudo-terminal (its controlling terminal: stdin, stdout, stderr), types
// typed into it, and returns what the test binary, run by it as the
// command, answered.
func underPTY(t *testing.T, typed string, argv ...string) string {
	t.Helper()
	m, s := openPTY(t)
	out := filepath.Join(t.TempDir(), "answer")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), answerEnv+"="+out, "TERM=xterm", "PS1=$ ", "ENV=")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s, s, s
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	var screen bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(&screen, m) // ends with EIO once the session is over
	}()
	if typed != "" {
		if _, err := m.WriteString(typed); err != nil {
			t.Fatal(err)
		}
	}
	err := cmd.Wait()
	m.Close()
	wg.Wait()
	if err != nil {
		t.Fatalf("%q: %v; the terminal showed %q", argv, err, screen.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("%q: no answer (%v); the terminal showed %q", argv, err, screen.String())
	}
	return string(b)
}

func testBinary(t *testing.T) string {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(bin, "'\"\\$` \n") {
		t.Skipf("the test binary's path %q is not quoted here", bin)
	}
	return bin
}

// The real thing: a command under a real pseudo-terminal, in a session
// whose leader is sh -c '…' (as sshd runs Ansible's command), is
// automation; one whose leader gives way to it (sh -c 'exec …'), too; one
// typed into an interactive sh -i is a person's, rewritten in place.
func TestAskUnderPTY(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	bin := testBinary(t)
	if got := underPTY(t, "", "sh", "-c", bin+"; exit $?"); !strings.HasPrefix(got, "false false automation: a command run in a session of its own (sh -c)") {
		t.Errorf("sh -c: %s", got)
	}
	if got := underPTY(t, "", "sh", "-c", "exec "+bin); !strings.HasPrefix(got, "false false automation: the terminal's session was started for this command alone") {
		t.Errorf("sh -c exec: %s", got)
	}
	if got := underPTY(t, bin+"\nexit\n", "sh", "-i"); got != "true true a person at a terminal: an interactive shell (sh) leads the terminal's session" {
		t.Errorf("sh -i: %s", got)
	}
}

// With no terminal at all (a service, cron), the answer says so.
func TestAskNoTerminal(t *testing.T) {
	bin := testBinary(t)
	out := filepath.Join(t.TempDir(), "answer")
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), answerEnv+"="+out)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); string(b) != "false false automation: no terminal on stdin and stderr" {
		t.Errorf("%q", b)
	}
}
