package drainer

import (
	"context"
	"io"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// Text from the Lease (written by any node's credentials) never reaches a
// terminal raw: control characters become '?', each line stays one line,
// and the live line is cut to the terminal's width.
func TestProgressSanitises(t *testing.T) {
	var b strings.Builder
	p := newProgress(&b, true, "node1", nil)
	p.width = func() int { return 40 }
	evil := "waiting for a reboot slot: node2 (reboot by \x1b]0;pwned\x07\x1b[2J\u202emallory\nsecond line\xff)"
	p.live(evil)
	got := b.String()
	if !strings.HasPrefix(got, "\r\x1b[Kgnsh: waiting for a ") {
		t.Fatalf("%q", got)
	}
	line := strings.TrimPrefix(got, "\r\x1b[K")
	if strings.ContainsAny(line, "\x1b\x07\n\u202e") || len([]rune(line)) > 39 || !strings.HasSuffix(line, "…") {
		t.Errorf("live line %q", line)
	}
	b.Reset()
	p.printf("warning: %s", evil)
	if got := b.String(); strings.ContainsAny(strings.TrimPrefix(got, "\n"), "\x1b\x07\u202e") || strings.Count(got, "\n") != 2 || // the live line's end, its own
		!strings.Contains(got, "gnsh: warning: waiting for a reboot slot: node2 (reboot by ?]0;pwned??[2J?mallory?second line?)\n") {
		t.Errorf("printed %q", got)
	}
	b.Reset()
	plain := newProgress(&b, false, "node1", nil)
	plain.live(evil)
	if got := b.String(); strings.ContainsAny(got, "\x1b\x07\u202e") || strings.Count(got, "\n") != 1 {
		t.Errorf("plain %q", got)
	}
	if oneLine("node-1: 3/5 pods gone, ünïcödé") != "node-1: 3/5 pods gone, ünïcödé" {
		t.Error("clean text changed")
	}
}

// A refusal quotes the cluster's text (here gnsh drain's, the API
// server's message): each of its lines is made safe, its line breaks stay.
func TestRefusalSanitised(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	f.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd \x1b]0;pwned\x07 has no leader")
	})
	d := newDrainer(t, f, "")
	err := d.DrainCommand(context.Background(), 0, false, io.Discard)
	refusal(t, err, "(503 Service Unavailable: etcd ?]0;pwned? has no leader)")
	if strings.ContainsAny(err.Error(), "\x1b\x07") {
		t.Errorf("%q", err)
	}
}

// Not a person's terminal (Ansible's captured one, the journal): the
// waiting lines are plain, without a carriage return or an escape
// sequence, and a line the gate says again (asked again, after another
// line) is not repeated.
func TestProgressPlainSaidOnce(t *testing.T) {
	var b strings.Builder
	p := newProgress(&b, false, "node1", nil)
	wait := "waiting for a reboot slot (place 2 in the queue of kube-system/gnsh-reboot-slots): earlier in the queue: node0 (waiting since 12:38:13)"
	p.live(wait)
	p.live(wait)
	p.printf("debug: asking again")
	p.live(wait)
	p.live("waiting for a reboot slot (place 1 in the queue of kube-system/gnsh-reboot-slots): cluster limit 1: node0 (draining)")
	p.done()
	got := b.String()
	if strings.ContainsAny(got, "\r\x1b") {
		t.Errorf("control characters in a captured terminal's output: %q", got)
	}
	if n := strings.Count(got, "gnsh: "+wait+"\n"); n != 1 {
		t.Errorf("the waiting line said %d times: %q", n, got)
	}
	if strings.Count(got, "\n") != 3 {
		t.Errorf("%q", got)
	}
}
