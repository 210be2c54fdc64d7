package agent

import (
	"context"
	"time"

	"github.com/gnsh/gnsh/internal/logind"
)

// KubeletTooTimeout bounds the one listing of logind's inhibitors that
// tells whether kubelet acts on a shutdown the agent drains for.
const KubeletTooTimeout = time.Second

// KubeletTooLine is the agent's warning when it drains for a shutdown that
// bypassed gnsh's commands while kubelet holds its delay lock: logind told
// both at once, so kubelet's graceful node shutdown stops the pods (all at
// once, or by priority group) beside the agent's drain, and the pods'
// PodDisruptionBudgets are not kept (issue 23, measured with the real
// kubelet). It does not say that gnsh evicts: with drain: false it does
// not. Printed after "gnsh: agent: ".
const KubeletTooLine = "warning: this shutdown bypassed gnsh's commands (systemctl reboot, the power button): " +
	"kubelet is stopping the pods now, whatever their PodDisruptionBudgets allow; " +
	"shut down with reboot, shutdown, poweroff or halt to drain first"

// kubeletToo says KubeletTooLine if kubelet holds a delay lock on shutdown.
// It runs beside the drain; a listing that fails or takes longer than
// KubeletTooTimeout says nothing.
func (g *ShutdownGuard) kubeletToo(ctx context.Context, l *logind.Logind) {
	ctx, cancel := context.WithTimeout(ctx, KubeletTooTimeout)
	defer cancel()
	list, err := l.ListInhibitors(ctx)
	if err != nil || len(logind.FindInhibitors(list, InhibitWhat, "delay", logind.KubeletWho)) == 0 {
		return
	}
	g.say("%s", KubeletTooLine)
}
