package slots

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
)

// Keeper is the node agent's part of the gate for its own node. It
// watches the Lease and, for this node's holder entry:
//
//   - made in an earlier boot (the node rebooted): it marks it Back, and
//     frees it once the node has been settled for Settle without a break:
//     Ready for this boot, gnsh's cordon lifted (unless the node was
//     cordoned before), its etcd member Ready;
//   - made in this boot and no longer renewed by the command that took it
//     (it handed off and exited, or was killed): it renews it while
//     Needed says the slot is relied on (a drain runs, a shutdown is under
//     way or scheduled), and frees it when nothing relies on it.
type Keeper struct {
	Gate   *Gate
	Node   string
	Boot   string
	Settle time.Duration
	// State reads this node and its etcd members (ok false: none known).
	State func(ctx context.Context) (NodeState, []Member, bool, error)
	// Needed says whether this boot's slot (h) is relied on (h.When: the
	// schedule it was taken for); when it is not, it calls free under the
	// same exclusion (the drain lock), so that no drain starts between the
	// answer and the write.
	Needed func(ctx context.Context, h Entry, free func() error) (needed bool, why string, err error)
	// WarnAfter: a holder this keeper has seen that long (other nodes'
	// too: keepers live long, waiters do not) gets GnshSlotHeldLong, once
	// (warnHeldLong). Each node waits a little more than that, by its
	// name, so that the first warns and the rest find it done. 0: never.
	WarnAfter time.Duration
	// Say logs a line; Debug a debug line (nil: none).
	Say, Debug func(string)

	tr Tracker

	since  time.Time // settled since, zero if not now
	isBack bool      // its entry is of an earlier boot (being settled)
	// period is what it renews this node's entry of this boot at
	// (renewEvery), zero while it has none.
	period time.Duration
}

// renewEvery is the period a keeper renews h at: the entry's own when it is
// shorter than the agent's (the config edited to a shorter renew without
// an agent restart: others free a holder silent for 3 of the entry's
// periods, not of the agent's).
func (k *Keeper) renewEvery(h Entry) time.Duration {
	return min(k.Gate.Renew, h.renewPeriod())
}

func (k *Keeper) say(format string, args ...any) {
	if k.Say != nil {
		k.Say(fmt.Sprintf(format, args...))
	}
}

func (k *Keeper) debug(format string, args ...any) {
	if k.Debug != nil {
		k.Debug(fmt.Sprintf(format, args...))
	}
}

// Run keeps this node's slot until ctx ends. Without permission to read
// the Lease (the kubelet's credentials) it says so once (debug) and looks
// again every minute.
func (k *Keeper) Run(ctx context.Context) error {
	g := k.Gate
	// One read first: these credentials may not use the Lease at all
	// (the kubelet's), and a watch would retry that at its own pace.
	forbidden := false
	for {
		_, err := g.get(ctx)
		if err == nil {
			break
		}
		wait := g.Renew
		if apierrors.IsForbidden(err) {
			// The kubelet's credentials, most likely; or an rbac.yaml
			// applied after the agent started: looked at again now and
			// then, not given up for the agent's life.
			if !forbidden {
				k.debug("reboot slots not kept: %v; looking again every %s", g.Unavailable(err), max(g.Renew, time.Minute))
			}
			forbidden = true
			wait = max(g.Renew, time.Minute)
		} else {
			k.debug("reboot slots: %v", err)
		}
		t := g.clock().NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
	}
	kick := make(chan struct{}, 1)
	store, ctrl := g.leaseInformer(func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go ctrl.RunWithContext(wctx)
	if !cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
		return ctx.Err()
	}
	for {
		if err := k.step(ctx, store); err != nil {
			k.debug("reboot slots: %v", err)
		}
		// Every half renew period (the entry's, when shorter); every
		// second while its entry is back (the Node's state, which no
		// watch here follows, decides when the settle time starts: the
		// next node waits on it).
		every := g.Renew / 2
		if k.period > 0 {
			every = min(every, k.period/2)
		}
		if k.isBack {
			every = min(every, time.Second)
		}
		t := g.clock().NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-kick:
		case <-t.C():
		}
		t.Stop()
	}
}

// step looks at this node's entry once and acts on it.
func (k *Keeper) step(ctx context.Context, store cache.Store) error {
	g := k.Gate
	o, ok, _ := store.GetByKey(g.Namespace + "/" + g.Name)
	if !ok {
		return nil
	}
	rec, err := Decode(o.(*coordinationv1.Lease))
	if err != nil {
		return err
	}
	k.tr.Clock = g.clock()
	k.tr.Observe(rec, World{})
	if k.WarnAfter > 0 {
		for _, h := range k.tr.Overdue(rec, k.WarnAfter+spread(k.Node, k.WarnAfter)) {
			if !g.warnHeldLong(ctx, h, k.Node) {
				k.tr.Unwarn(h)
			}
		}
	}
	h, ok := rec.Holder(k.Node)
	k.isBack = ok && h.Boot != k.Boot
	k.period = 0
	if !ok {
		k.since = time.Time{}
		return nil
	}
	now := g.clock().Now()
	if k.isBack {
		return k.back(ctx, h, now)
	}
	k.since = time.Time{}
	k.period = k.renewEvery(h)
	// Silent for how long, as this keeper saw that very entry (a new
	// entry, even with the same Beat, is silent from when it is seen).
	if k.tr.Silent(h) < k.period+k.period/4 {
		// Its taker renews it. Looked at every half period, renewed
		// here once silent for a period and a quarter: at most about
		// 1.75 periods between beats, well within the 3 (of the
		// entry's) after which others may free it.
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, 3*g.APITimeout)
	defer cancel()
	needed, why, err := k.Needed(rctx, h, func() error {
		freed, err := g.Free(rctx, h.same)
		if err == nil && len(freed) > 0 {
			k.say("freed the reboot slot of %s in %s: the %s it was taken for did not happen and nothing relies on it", k.Node, g.Where(), h.Action)
			g.event(rctx, k.Node, "Normal", ReasonReleased, "Freed the reboot slot of %s: the %s requested by %s did not happen", g.Where(), h.Action, h.Who)
		}
		return err
	})
	if !needed {
		return err
	}
	if err != nil {
		// In doubt, it is needed.
		k.debug("reboot slots: %v; renewing the slot all the same", err)
	}
	k.debug("renewing the reboot slot of %s for its taker: %s", k.Node, why)
	_, _, _, err = g.changeHolder(rctx, h, func(e *Entry) bool { e.Beat++; return true })
	return err
}

// back handles a holder entry of an earlier boot: Back, then freed once
// settled for Settle.
func (k *Keeper) back(ctx context.Context, h Entry, now time.Time) error {
	g := k.Gate
	rctx, cancel := context.WithTimeout(ctx, 3*g.APITimeout)
	defer cancel()
	if h.Phase != Back {
		if _, _, _, err := g.changeHolder(rctx, h, func(e *Entry) bool {
			if e.Phase == Back {
				return false
			}
			e.Phase = Back
			return true
		}); err != nil {
			return err
		}
		k.say("%s is back on a new boot; its reboot slot of %s is freed once it has been Ready and uncordoned for %s", k.Node, g.Where(), k.Settle)
	}
	st, members, known, err := k.State(rctx)
	if err != nil {
		return err
	}
	w := World{Nodes: map[string]NodeState{k.Node: st}}
	if known {
		w.setEtcd(members)
	}
	if !settled(h, w) {
		k.since = time.Time{}
		return nil
	}
	if k.since.IsZero() {
		k.since = now
	}
	if now.Sub(k.since) < k.Settle {
		return nil
	}
	freed, err := g.Free(rctx, h.same)
	if err == nil && len(freed) > 0 {
		k.say("freed the reboot slot of %s in %s: back, Ready and uncordoned for %s", k.Node, g.Where(), now.Sub(k.since).Round(time.Second))
		g.event(rctx, k.Node, "Normal", ReasonReleased, "Freed the reboot slot of %s: back after the %s requested by %s, Ready and uncordoned for %s",
			g.Where(), h.Action, h.Who, now.Sub(k.since).Round(time.Second))
		k.since = time.Time{}
	}
	return err
}

// spread is up to a tenth of after (at most a minute), by name: so that
// many keepers seeing the same holder overdue do not all try to mark it at
// once.
func spread(node string, after time.Duration) time.Duration {
	h := fnv.New32a()
	h.Write([]byte(node))
	return min(after/10, time.Minute) * time.Duration(h.Sum32()%64) / 64
}
