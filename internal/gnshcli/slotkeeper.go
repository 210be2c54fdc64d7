package gnshcli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/slots"
)

// keepSlots runs the node agent's part of the reboot-slot gate
// (slots.Keeper) until ctx ends: it connects (again every renew period
// until the API server answers), then keeps this node's slot. connect
// gives the drain's client (this Node, its Events) and the gate's (the
// slots).
func keepSlots(ctx context.Context, d *drainer.Drainer, cfg config.Config, connect func(context.Context) (kubernetes.Interface, kubernetes.Interface, string, error),
	say func(format string, args ...any), debug bool) {
	if cfg.Slots.Gate == config.GateOff {
		return
	}
	var c, gc kubernetes.Interface
	var node string
	for {
		var err error
		if c, gc, node, err = connect(ctx); err == nil {
			break
		}
		if debug {
			say("debug: reboot slots: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(cfg.Slots.Renew.D()):
		}
	}
	g := slots.NewGate(gc, cfg)
	g.Clock = d.Clock
	g.Event = func(ctx context.Context, node, typ, reason, msg string) {
		if cfg.Events {
			_ = drainer.PostEvent(ctx, c, node, typ, reason, msg, cfg.APITimeout.D())
		}
	}
	k := &slots.Keeper{Gate: g, Node: node, Boot: d.ThisBoot(), Settle: cfg.Slots.Settle.D(), WarnAfter: cfg.Slots.WarnAfter.D(),
		State: func(ctx context.Context) (slots.NodeState, []slots.Member, bool, error) {
			rctx, cancel := context.WithTimeout(ctx, cfg.APITimeout.D())
			defer cancel()
			n, err := c.CoreV1().Nodes().Get(rctx, node, metav1.GetOptions{})
			if err != nil {
				return slots.NodeState{}, nil, false, err
			}
			st := slots.StateOf(n)
			if st.ControlPlane {
				ms, err := g.EtcdMembers(ctx)
				return st, ms, err == nil, nil
			}
			// Not labelled so: the etcd pods on this node, if any (one
			// small list, whatever the layout); a node that hosts one
			// waits for it (the keeper guards it). One that cannot tell
			// (the pods not listed) waits too: in doubt, guarded, its
			// member unknown, its slot not freed yet.
			ms, err := g.EtcdMembersOn(ctx, node)
			if err != nil {
				st.ControlPlane = true
				return st, nil, false, nil
			}
			return st, ms, true, nil
		},
		Needed: func(ctx context.Context, h slots.Entry, free func() error) (bool, string, error) {
			return slotNeeded(ctx, d, node, h, cfg, free)
		},
		Say: func(l string) { say("%s", l) },
	}
	if debug {
		k.Debug = func(l string) { say("debug: %s", l) }
	}
	_ = k.Run(ctx)
}

// slotNeeded says whether this boot's slot h is relied on: a gnsh drain
// holds the drain lock, a wrapper's run is under way (it takes its slot
// before the drain lock), or a shutdown is under way or due (Relies: within
// drainTimeout, or the very schedule the slot was taken for, h.When). If
// not, it frees the slot still under the lock, so that no wrapper starts
// in between. In doubt (an answer it cannot get) the slot is needed.
func slotNeeded(ctx context.Context, d *drainer.Drainer, node string, h slots.Entry, cfg config.Config, free func() error) (bool, string, error) {
	l, err := d.AcquireLock("reboot slot check", node, time.Now().Add(4*cfg.APITimeout.D()+time.Second))
	var held *drainer.HeldError
	if errors.As(err, &held) {
		return true, fmt.Sprintf("%v", held), nil
	}
	if err != nil {
		return true, "", err
	}
	defer l.Release()
	if runs := d.RunsPending(); len(runs) > 0 {
		// A wrapper that took a slot holds no lock until its cordon.
		return true, "a gnsh command runs: " + strings.Join(runs, ", "), nil
	}
	if d.Relies != nil {
		why, err := d.Relies(ctx, &drain.Ownership{Action: h.Action, BootID: h.Boot, When: h.When}, cfg.DrainTimeout.D())
		if err != nil {
			return true, "", err
		}
		if why != "" {
			return true, why, nil
		}
	}
	return false, "", free()
}
