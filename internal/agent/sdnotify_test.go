package agent

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

func TestNotifier(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n := Notifier{Socket: path}
	if err := n.Notify("READY=1\nSTATUS=started"); err != nil {
		t.Fatal(err)
	}
	if err := n.Status("a\nb"); err != nil {
		t.Fatal(err)
	}
	_ = l.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	for _, want := range []string{"READY=1\nSTATUS=started", "STATUS=a b"} {
		k, err := l.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(buf[:k]); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	if err := (Notifier{}).Notify("READY=1"); err != nil {
		t.Errorf("no socket: %v", err)
	}
	if err := (Notifier{Socket: filepath.Join(t.TempDir(), "none")}).Notify("READY=1"); err == nil {
		t.Error("no error for a missing socket")
	}
}

func TestNotifierAbstract(t *testing.T) {
	name := "gnsh-test-" + time.Now().Format("150405.000000000")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: "\x00" + name, Net: "unixgram"})
	if err != nil {
		t.Skip("no abstract sockets:", err)
	}
	defer l.Close()
	if err := (Notifier{Socket: "@" + name}).Notify("READY=1"); err != nil {
		t.Fatal(err)
	}
	_ = l.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	k, err := l.Read(buf)
	if err != nil || string(buf[:k]) != "READY=1" {
		t.Errorf("%q, %v", buf[:k], err)
	}
}
