package drainer

// outcome is how an attempt to drain ended, as the policy sees it.
type outcome int

const (
	drained       outcome = iota // every evicted pod is gone
	notANode                     // no kubeconfig: not a Kubernetes node
	badConfig                    // /etc/gnsh/config.yaml is invalid
	notPermitted                 // the kubeconfig cannot be read, or the lock made: not root
	lockHeld                     // another gnsh is draining this node
	apiFailed                    // the API server is unreachable, or answers 401/403/429/5xx
	notRegistered                // the cluster has no Node of this name
	otherMachine                 // the Node of that name is another machine
	kubeletDown                  // pods evicted, but no kubelet to finish them
	blocked                      // not drained within the drain timeout (PDBs, slow pods)
	interrupted                  // SIGINT or SIGTERM
	// drainedBefore: gnsh's cordon for this very schedule already stands,
	// and a drain under it finished (only the agent's drain ahead of a
	// schedule looks for it).
	drainedBefore
	noSlot   // no reboot slot within slots.wait: the limits held it back
	gateDown // the reboot-slot gate cannot be used, and slots.gate is required
	// cancelled: shutdown -c stopped this run for a schedule while it
	// waited for its reboot slot or drained (runnote.go).
	cancelled
	// queued: no reboot slot at once, and the request was queued for the
	// node agent (queue.go): nothing cordoned, exit 0.
	queued
	// queueRetry: the node agent's run of a queued reboot did not hand
	// off (no slot within its wait, the drain refused, the API server
	// failing, withdrawn): gnsh's cordon undone, its slot freed; the
	// agent asks again while the request stands.
	queueRetry
)

var outcomeNames = [...]string{"drained", "not a node", "bad config", "not permitted", "lock held", "API failed",
	"not registered", "other machine", "kubelet down", "blocked", "interrupted", "already drained", "no slot", "gate down", "cancelled", "queued", "queue retry"}

func (o outcome) String() string { return outcomeNames[o] }

// purpose is what the drain is for.
type purpose int

const (
	forShutdown    purpose = iota // before a shutdown, reboot, poweroff or halt
	forForce                      // before -f: a best-effort cordon, never a drain
	forMaintenance                // gnsh drain
)

// verdict is what the policy decides for an outcome.
type verdict struct {
	proceed bool // hand off (or, for gnsh drain, exit 0)
	undo    bool // undo the cordon this run made
	warn    bool // tell the admin (a warning when proceeding)
}

// decide is the whole drain policy. Its rules:
//
//   - A shutdown is never refused for a fault on the cluster's side: an
//     unreachable or failing API server, a Node unknown to the cluster or
//     belonging to another machine, or a dead kubelet that cannot finish
//     the evicted pods. The admin is warned and the node goes down; a
//     cordon gnsh made stays, and the node agent lifts it after the boot.
//   - A shutdown is refused (exit 1, nothing handed off, gnsh's cordon
//     undone) only when the cluster's own rules say no within the drain
//     timeout (PodDisruptionBudgets, pods not going), unless forceDrain;
//     and for local reasons the admin can fix at once: an invalid config
//     file, not being root, another gnsh draining.
//   - A shutdown waits for a reboot slot (internal/slots) before its
//     cordon, and is refused when none comes within slots.wait, or when
//     the gate cannot be used and slots.gate is required (optional: a
//     warning, and it goes on).
//   - SIGINT/SIGTERM stop the drain, undo gnsh's cordon and refuse; so
//     does shutdown -c for a run that would schedule a shutdown.
//   - -f never waits and is never refused by the drain.
//   - gnsh drain (maintenance) succeeds only when drained; its cordon stays
//     on failure (as kubectl drain's) except when interrupted.
func decide(o outcome, p purpose, forceDrain bool) verdict {
	switch {
	case o == drained, o == drainedBefore:
		return verdict{proceed: true}
	case o == interrupted, o == cancelled, o == queueRetry:
		return verdict{undo: true, warn: true}
	case p == forMaintenance:
		return verdict{warn: true}
	case o == notANode:
		return verdict{proceed: true}
	case p == forForce:
		return verdict{proceed: true, warn: true}
	}
	switch o {
	case badConfig, notPermitted, lockHeld, noSlot, gateDown, queued: // nothing cordoned yet
		return verdict{warn: true}
	case blocked:
		if forceDrain {
			return verdict{proceed: true, warn: true}
		}
		return verdict{undo: true, warn: true}
	}
	// apiFailed, notRegistered, otherMachine, kubeletDown
	return verdict{proceed: true, warn: true}
}
