package drainer

import (
	"context"
	"io"
	"strings"
	"syscall"
	"testing"

	"github.com/gnsh/gnsh/internal/handoff"
	"github.com/gnsh/gnsh/internal/legacy"
)

// roHost is a handoff.Host as the node agent sees the machine under
// gnsh.service (ProtectSystem=strict): /run/systemd is read-only.
type roHost struct{ ops []string }

func (h *roHost) Euid() int                     { return 0 }
func (h *roHost) UID() int                      { return 0 }
func (h *roHost) OnTTY() bool                   { return false }
func (h *roHost) InChroot() bool                { return false }
func (h *roHost) InContainer() bool             { return false }
func (h *roHost) RebootParam() string           { return "fw" }
func (h *roHost) Sessions() []handoff.Session   { return nil }
func (h *roHost) UserName(uid uint32) string    { return "root" }
func (h *roHost) ProcessComm(pid uint32) string { return "" }
func (h *roHost) WriteRebootParam(p string) error {
	h.ops = append(h.ops, "write "+p)
	return syscall.EROFS
}
func (h *roHost) UnlinkRebootParam() error {
	h.ops = append(h.ops, "unlink")
	return syscall.EROFS
}

type stopPreparer struct{ seen *legacy.Request }

func (p *stopPreparer) Prepare(_ context.Context, r *legacy.Request) (handoff.Prepared, error) {
	p.seen = r
	return nil, legacy.Fail("stopped here")
}

// The reboot parameter a queued `reboot ARG` or plain `reboot` set stays
// for the agent's hand-off (QueuedError keeps it), and that hand-off
// neither writes nor unlinks it: under gnsh.service the agent cannot
// ("Failed to unlink reboot parameter file: Read-only file system" on
// every try, the queued reboot never handed off).
func TestQueuedHandoffLeavesTheRebootParam(t *testing.T) {
	var k handoff.RebootParamKeeper = &QueuedError{Msg: "gnsh: queued"}
	if !k.KeepRebootParam() {
		t.Fatal("a QueuedError must keep the reboot parameter")
	}
	for _, c := range []struct {
		op    legacy.ParamOp
		param string
	}{{legacy.ParamUnlink, ""}, {legacy.ParamWrite, "fw"}} {
		q := &QueuedReboot{Command: "reboot", Action: "reboot", ParamOp: c.op, Param: c.param}
		h := &roHost{}
		p := &stopPreparer{}
		r := &handoff.Runner{Stdout: io.Discard, Stderr: io.Discard, Host: h, Preparer: p}
		err := r.Run(context.Background(), q.Request())
		if err == nil || !strings.Contains(err.Error(), "stopped here") || p.seen == nil {
			t.Errorf("%v: hand-off stopped before the drain: %v", c.op, err)
		}
		if len(h.ops) != 0 {
			t.Errorf("%v: the agent's hand-off touched the reboot parameter: %q", c.op, h.ops)
		}
		if q.ParamOp != c.op || q.Param != c.param {
			t.Errorf("the record keeps what the command did: %v %q", q.ParamOp, q.Param)
		}
	}
}
