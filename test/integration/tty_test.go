package integration

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gnsh/gnsh/internal/logind/logindtest"
	"github.com/gnsh/gnsh/test/internal/rig"
)

// ptyPair opens a new pseudo-terminal: its master and its follower.
func ptyPair(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		rig.Need(t, "/dev/ptmx")
		t.Fatalf("no pseudo-terminal: %v", err)
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

// TestSlotsWaitingLineOnATerminal: the waiting line is rewritten in place
// only for a person at the terminal. The real wrapper, its reboot waiting
// for a slot (the other node is out), runs on a pseudo-terminal twice: as
// Ansible runs it over ssh -tt (the session's leader is sh -c '…'), its
// output holds plain lines, no carriage return or escape sequence, each
// said once; typed into an interactive shell, the waiting line is the live
// one. Both are refused after slots.wait, nothing cordoned.
func TestSlotsWaitingLineOnATerminal(t *testing.T) {
	rig.Need(t, "setsid")
	k := startCluster(t)
	gateKC := k.gnshIdentity(t)
	n := k.newNode(t, "tty-a")
	other := k.newNode(t, "tty-b")
	other.adminCordon()
	cfg := writeConfig(t, config("node: "+n.name, gated("slots: {maxUnavailable: 1, wait: 4s, renew: 2s}", gateKC(n.name))))
	nodeKC := k.cp.NodeKubeconfig(t, n.name)
	reboot, shutdown := filepath.Join(binDir, "reboot"), filepath.Join(binDir, "shutdown")
	for _, c := range []struct {
		name  string
		argv  []string
		typed string
		live  bool
	}{
		{"ansible", []string{"setsid", "-w", "-c", "sh", "-c", shutdown + ` -r 0 "Reboot initiated by Ansible"; exit $?`}, "", false},
		{"person", []string{"setsid", "-w", "-c", "sh", "-i"}, reboot + "; exit\n", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, s := ptyPair(t)
			bus := logindtest.StartBus(t)
			ld := bus.StartLogind(t, logindtest.Options{Version: 252})
			p := rig.Start(t, rig.Spec{Env: []string{"DBUS_SYSTEM_BUS_ADDRESS=" + bus.Address(), "KUBECONFIG=" + nodeKC,
				"GNSH_CONFIG=" + cfg, "LOGNAME=alice", "TERM=xterm", "PS1=$ ", "ENV="}, Argv: c.argv, TTY: s})
			s.Close()
			var screen bytes.Buffer
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(&screen, m) // ends with EIO once the session is over
			}()
			if c.typed != "" {
				if _, err := m.WriteString(c.typed); err != nil {
					t.Fatal(err)
				}
			}
			r := p.Wait()
			m.Close()
			wg.Wait()
			out := screen.String()
			t.Logf("the terminal showed:\n%q", out)
			if r.Code != 1 || r.Kernel != "" || len(ld.Calls()) != 0 {
				t.Fatalf("exit %d, kernel %q, logind got %v: want a refusal", r.Code, r.Kernel, members(ld.Calls()))
			}
			n.wantCordon("")
			const wait = "gnsh: waiting for a reboot slot (place 1 in the queue of gnsh/reboot-slots): cluster limit 1: tty-b (cordoned"
			if !strings.Contains(out, wait) {
				t.Errorf("no waiting line")
			}
			live := strings.Contains(out, "\r\x1b[K"+wait)
			switch {
			case c.live && !live:
				t.Errorf("a person's terminal did not get the live line")
			case !c.live && strings.ContainsAny(out, "\x1b"):
				t.Errorf("escape sequences on a captured terminal")
			case !c.live && strings.Count(out, wait) != 1:
				t.Errorf("the waiting line said %d times", strings.Count(out, wait))
			}
		})
	}
}
