package logindtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"html"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// busConfig is a system-bus-like configuration with a policy that lets
// any local user own any name and send or receive anything. There are no
// service directories, so calling a name nobody owns fails with
// org.freedesktop.DBus.Error.ServiceUnknown, as on a system bus where
// logind is not activatable.
const busConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow receive_sender="*"/>
    <allow eavesdrop="true"/>
  </policy>
</busconfig>
`

// startTimeout bounds how long NewBus waits for dbus-daemon to print its
// address.
const startTimeout = 10 * time.Second

// Bus is a private dbus-daemon.
type Bus struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the daemon has exited
	errb *bytes.Buffer // daemon stderr, for error messages

	closeOnce sync.Once
	closeErr  error
}

// NewBus starts a private dbus-daemon listening on a socket in a new
// temporary directory. The error wraps exec.ErrNotFound if dbus-daemon is
// not installed. Call Close to stop it.
func NewBus() (*Bus, error) {
	daemon, err := exec.LookPath("dbus-daemon")
	if err != nil {
		return nil, fmt.Errorf("start private bus: %w", err)
	}
	// os.MkdirTemp rather than t.TempDir: a unix socket path must fit in
	// 108 bytes and test names can be long.
	dir, err := os.MkdirTemp("", "logindtest")
	if err != nil {
		return nil, fmt.Errorf("start private bus: %w", err)
	}
	listen := "unix:path=" + dbus.EscapeBusAddressValue(filepath.Join(dir, "system_bus_socket"))
	cfg := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, busConfig, html.EscapeString(listen)), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start private bus: %w", err)
	}

	b := &Bus{dir: dir, done: make(chan struct{}), errb: new(bytes.Buffer)}
	b.cmd = exec.Command(daemon, "--nofork", "--nopidfile", "--nosyslog", "--print-address", "--config-file="+cfg)
	b.cmd.Stderr = &lockedWriter{w: b.errb}
	b.cmd.SysProcAttr = sysProcAttr()
	stdout, err := b.cmd.StdoutPipe()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start private bus: %w", err)
	}
	if err := b.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start private bus: %w", err)
	}

	line := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		s, _ := r.ReadString('\n')
		line <- strings.TrimSpace(s)
		// Keep draining so the daemon never blocks on a full pipe, and
		// only then wait (exec.Cmd requires reads to finish before Wait).
		_, _ = io.Copy(io.Discard, r)
		_ = b.cmd.Wait()
		close(b.done)
	}()

	select {
	case b.addr = <-line:
		if b.addr != "" {
			return b, nil
		}
		<-b.done
		err = errors.New("dbus-daemon exited without printing an address")
	case <-time.After(startTimeout):
		err = fmt.Errorf("dbus-daemon printed no address within %s", startTimeout)
	}
	_ = b.Close()
	return nil, fmt.Errorf("start private bus: %w: %s", err, strings.TrimSpace(b.stderr()))
}

// StartBus starts a private dbus-daemon for t and stops it when t ends.
// It skips t if dbus-daemon is not installed.
func StartBus(t testing.TB) *Bus {
	t.Helper()
	b, err := NewBus()
	if errors.Is(err, exec.ErrNotFound) {
		t.Skipf("dbus-daemon not installed: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("stop private bus: %v", err)
		}
	})
	return b
}

// Address returns the bus address as printed by dbus-daemon, e.g.
// "unix:path=$TMPDIR/logindtestNNN/system_bus_socket,guid=…". Use it as
// DBUS_SYSTEM_BUS_ADDRESS.
func (b *Bus) Address() string { return b.addr }

// SetSystemBusEnv sets DBUS_SYSTEM_BUS_ADDRESS to the bus address for the
// duration of t (t.Setenv, so t must not be parallel).
func (b *Bus) SetSystemBusEnv(t testing.TB) {
	t.Helper()
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", b.addr)
}

// Connect returns a new client connection to the bus, closed when t ends.
func (b *Bus) Connect(t testing.TB) *dbus.Conn {
	t.Helper()
	conn, err := dbus.Connect(b.addr)
	if err != nil {
		t.Fatalf("connect to private bus: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// StartLogind serves a fake logind on the bus until t ends.
func (b *Bus) StartLogind(t testing.TB, o Options) *Logind {
	t.Helper()
	l, err := NewLogind(b.addr, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// StartSystemd serves a fake systemd1 manager on the bus until t ends.
// Without it, calls to org.freedesktop.systemd1 fail with ServiceUnknown.
func (b *Bus) StartSystemd(t testing.TB, o SystemdOptions) *Systemd {
	t.Helper()
	s, err := NewSystemd(b.addr, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Close stops the daemon and removes its directory. It is safe to call
// more than once.
func (b *Bus) Close() error {
	b.closeOnce.Do(func() {
		if b.cmd.Process != nil {
			_ = b.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-b.done:
			case <-time.After(5 * time.Second):
				_ = b.cmd.Process.Kill()
				<-b.done
			}
		}
		b.closeErr = os.RemoveAll(b.dir)
	})
	return b.closeErr
}

func (b *Bus) stderr() string {
	w := b.cmd.Stderr.(*lockedWriter)
	w.mu.Lock()
	defer w.mu.Unlock()
	return b.errb.String()
}

// lockedWriter lets the daemon's stderr be read while exec copies into it.
type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
