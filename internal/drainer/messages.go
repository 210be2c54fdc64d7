package drainer

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/internal/signals"
	"github.com/gnsh/gnsh/internal/slots"
)

// Refusal is a command gnsh refuses: Msg is the whole text for stderr
// (each line starting "gnsh: "); dispatch maps it to exit status 1.
type Refusal struct {
	Msg string
	Err error // the cause
}

func (e *Refusal) Error() string { return e.Msg }
func (e *Refusal) Unwrap() error { return e.Err }

// Interrupted is a drain stopped by SIGINT or SIGTERM; dispatch maps it to
// 128+signal, as a shell reports a command killed by it.
type Interrupted struct {
	Sig syscall.Signal
	Msg string // the text for stderr; a default if empty
}

func (e *Interrupted) Error() string {
	if e.Msg != "" {
		return e.Msg
	}
	return "gnsh: drain " + e.what()
}

// what is "interrupted by SIGINT".
func (e *Interrupted) what() string { return "interrupted by " + signals.Name(e.Sig) }

// configUnreadable is a config file that exists but cannot be read: a
// non-root user and a 0600 file.
type configUnreadable struct{ err error }

func (e *configUnreadable) Error() string { return e.err.Error() }
func (e *configUnreadable) Unwrap() error { return e.err }

// eventText says in an Event why a shutdown went on without a finished
// drain.
func (o outcome) eventText() string {
	switch o {
	case blocked:
		return "drain incomplete, forced"
	case kubeletDown:
		return "pods evicted, kubelet not running: not waiting for them"
	case otherMachine:
		return "not drained: the Node is another machine"
	case notRegistered:
		return "not drained: no such Node"
	case lockHeld:
		return "no cordon: another gnsh is draining"
	}
	return "not drained: " + o.String()
}

// Signal is the signal that interrupted the drain.
func (e *Interrupted) Signal() syscall.Signal { return e.Sig }

// tell says what the outcome means, as the verdict decided it: the
// returned text is the refusal (each line "gnsh: …") when the command does
// not proceed, else a warning to print ("" for none). Undoing is told by
// undo itself.
func (r *run) tell(o outcome, v verdict, err error) string {
	if o == queueRetry {
		// The node agent's one line; it asks again (agent/queue.go).
		return "gnsh: the queued " + r.verb + " was not handed off: " + oneLine(errString(err))
	}
	if o == drained {
		return ""
	}
	node := "the node"
	if r.sess != nil {
		node = r.sess.node
	}
	if r.purpose == forMaintenance {
		return r.tellMaintenance(o, err, node)
	}
	verb, going := r.verb, r.going()
	switch o {
	case notANode:
		r.debug("no kubeconfig ($KUBECONFIG, %s, %s): not a Kubernetes node, not draining",
			kube.KubeletKubeconfigList(), filepath.Join(r.d.KubeRoot, kube.GnshKubeconfig))
		return ""
	case badConfig:
		var ke *kube.KubeconfigError
		switch {
		case v.proceed:
			return fmt.Sprintf("%v; not cordoning", err)
		case errors.As(err, &ke):
			return fmt.Sprintf("gnsh: %v; nothing was shut down: %s, or run the command again with --no-drain", err, kubeconfigFix(ke))
		}
		return configLines(err) + "\ngnsh: nothing was shut down; fix the file, or run the command again with --no-drain"
	case notPermitted:
		if v.proceed {
			return fmt.Sprintf("%v; %s without a cordon", err, going)
		}
		return fmt.Sprintf("gnsh: cannot drain this Kubernetes node as %s (%v); run the command as root, or again with --no-drain",
			r.d.who().User, err)
	case lockHeld:
		if v.proceed {
			return fmt.Sprintf("%v; %s -f goes on without a cordon", err, verb)
		}
		return "gnsh: " + err.Error()
	case interrupted:
		return "gnsh: drain interrupted by " + signals.Name(r.d.Signal.Caught()) + "; nothing was shut down"
	case cancelled:
		what := "the " + verb
		if r.own.When != nil {
			what += " scheduled for " + r.own.When.Local().Format("15:04:05")
		}
		var st *stoppedError
		if errors.As(err, &st) && st.Phase != "" {
			return fmt.Sprintf("gnsh: %s was cancelled by %s (shutdown -c) while this command was %s; nothing was scheduled", what, st.By, st.Phase)
		}
		return fmt.Sprintf("gnsh: %s was cancelled (shutdown -c); nothing was scheduled", what)
	case blocked:
		var be *drain.BlockedError
		switch {
		case v.proceed:
			return fmt.Sprintf("%v; --force-drain: %s anyway", err, going)
		case errors.As(err, &be) && be.StrictOnly():
			return fmt.Sprintf("gnsh: %v\ngnsh: %s refused (strictDrain: true in %s); nothing was evicted. To %s anyway, run the command again with --force-drain (evict the other pods, leave these, then go on) or --no-drain; or set strictDrain: false.",
				err, verb, r.d.configPath(), verb)
		}
		return fmt.Sprintf("gnsh: %v\ngnsh: %s refused. To %s anyway, run the command again with --force-drain (evict what can be evicted, then go on) or --no-drain; or give the drain more time with --drain-timeout=DURATION.",
			err, verb, verb)
	case kubeletDown:
		return fmt.Sprintf("%v; %s without waiting for them", err, going)
	case noSlot:
		switch {
		case slots.Broken(err):
			return fmt.Sprintf("gnsh: %s\ngnsh: %s refused whatever slots.gate says: without the record no limit can be kept. "+
				"Once '%s' (admin credentials) has started a new record, run it again; or go without the gate (and without a drain) with --no-drain or -f.",
				oneLine(err.Error()), verb, slots.ResetCommand)
		case slots.Unreadable(err):
			return fmt.Sprintf("gnsh: %s\ngnsh: %s refused whatever slots.gate says: this gnsh cannot read a newer gnsh's record. "+
				"Upgrade gnsh on this node, then run it again; or go without the gate (and without a drain) with --no-drain or -f.",
				oneLine(err.Error()), verb)
		}
		quorum := ""
		if heldByQuorum(err) {
			quorum = "; or override the etcd quorum guard with --force-quorum"
		}
		lost := ""
		if r.queueLost != "" {
			lost = " (" + r.queueLost + ")"
		}
		return fmt.Sprintf("gnsh: %s\ngnsh: %s refused%s. Run it again later; or free a slot with 'gnsh slots release --node NODE' (admin credentials); or go without the gate (and without a drain) with --no-drain or -f%s.",
			oneLine(err.Error()), verb, lost, quorum)
	case gateDown:
		if errors.As(err, new(*gateUnreached)) {
			// Before the gate: nothing cordoned, no slot asked for.
			return fmt.Sprintf("gnsh: cannot take a reboot slot: %s; %s refused (slots.gate: required in %s): run it again once that is fixed, or go without the gate (and without a drain) with --no-drain or -f",
				oneLine(errText(err, r.kubeconfig)), verb, r.d.configPath())
		}
		return fmt.Sprintf("gnsh: reboot slots: %s\ngnsh: %s refused (slots.gate: required in %s). Fix the gate, or go without it (and without a drain) with --no-drain or -f.",
			oneLine(err.Error()), verb, r.d.configPath())
	}
	// apiFailed, notRegistered, otherMachine: the cluster's side. A cordon
	// made stays: the node agent lifts it after the boot.
	what := errText(err, r.kubeconfig)
	switch {
	case r.purpose == forForce:
		return fmt.Sprintf("%s; %s -f goes on without a cordon", what, verb)
	case r.draining:
		return fmt.Sprintf("%s; %s without finishing the drain of %s", what, going, node)
	}
	return fmt.Sprintf("%s; %s without draining", what, going)
}

func (r *run) tellMaintenance(o outcome, err error, node string) string {
	var ke *kube.KubeconfigError
	switch {
	case o == badConfig && errors.As(err, &ke):
		return fmt.Sprintf("gnsh: %v; %s", err, kubeconfigFix(ke))
	case o == badConfig:
		return configLines(err)
	}
	switch o {
	case notANode:
		return fmt.Sprintf("gnsh: no kubeconfig found ($KUBECONFIG, %s, %s); pass --kubeconfig", kube.KubeletKubeconfigList(), kube.GnshKubeconfig)
	case interrupted:
		return "gnsh: drain interrupted by " + signals.Name(r.d.Signal.Caught())
	case notPermitted:
		return fmt.Sprintf("gnsh: cannot drain as %s (%v); run gnsh drain as root", r.d.who().User, err)
	}
	msg := "gnsh: " + errText(err, r.kubeconfig)
	if be := (*drain.BlockedError)(nil); errors.As(err, &be) && be.StrictOnly() {
		msg = fmt.Sprintf("gnsh: %v; nothing was evicted: move them yourself, or set strictDrain: false in %s", err, r.d.configPath())
	}
	if r.cordoned {
		msg += fmt.Sprintf("\ngnsh: %s stays cordoned; 'gnsh uncordon' makes it schedulable again", node)
	}
	return msg
}

// kubeconfigFix says how to get round a kubeconfig named by --kubeconfig
// or the config file that cannot be used.
func kubeconfigFix(ke *kube.KubeconfigError) string {
	search := fmt.Sprintf("gnsh then looks in $KUBECONFIG, %s, %s", kube.KubeletKubeconfigList(), kube.GnshKubeconfig)
	switch {
	case ke.FromFlag():
		return "pass a kubeconfig that exists, or leave --kubeconfig out (" + search + ")"
	case strings.HasPrefix(ke.From, "slots.kubeconfig"):
		return "fix slots.kubeconfig or remove it (the reboot-slot gate then uses " + kube.GnshKubeconfig + " if it is there, else the drain's kubeconfig)"
	case ke.FromGnshOwn():
		return "fix " + ke.Path + " (the Ansible role writes it when given gnsh_kubectl_kubeconfig) or remove it (the reboot-slot gate then uses the drain's kubeconfig)"
	}
	return "fix the kubeconfig key or remove it (" + search + ")"
}

// configLines is an invalid config file's problems, each on a line of its
// own ("gnsh: FILE: line N: PATH: problem; fix"), or err's text.
func configLines(err error) string {
	var ce *config.Error
	if !errors.As(err, &ce) {
		return "gnsh: " + err.Error()
	}
	return "gnsh: " + strings.Join(ce.Lines(), "\ngnsh: ")
}

// NoSlotFix is what an admin can do about a refusal for want of a slot
// (a *SlotRefusal): the node agent says it after cancelling a schedule.
// A record that cannot be read is not helped by waiting or by a release.
func NoSlotFix(err error) string {
	switch {
	case slots.Broken(err):
		return "schedule it again once '" + slots.ResetCommand + "' (admin credentials) has started a new record"
	case slots.Unreadable(err):
		return "upgrade gnsh on this node, then schedule it again"
	}
	return "schedule it again later, or free a slot with 'gnsh slots release --node NODE'"
}

// heldByQuorum reports whether the etcd quorum guard was among what held a
// refused request back.
func heldByQuorum(err error) bool {
	var we *slots.WaitError
	if !errors.As(err, &we) {
		return false
	}
	for _, b := range we.Blocks {
		if b.Limit == slots.LimitQuorum {
			return true
		}
	}
	return false
}

// going is "rebooting", "powering off", …
func (r *run) going() string {
	switch r.verb {
	case "poweroff":
		return "powering off"
	case "reboot":
		return "rebooting"
	case "halt":
		return "halting"
	case "kexec":
		return "rebooting with kexec"
	}
	return r.verb
}

// undoReason is the first half of the line that says a cordon was undone.
func (r *run) undoReason(o outcome) string {
	switch o {
	case interrupted:
		return "drain interrupted by " + signals.Name(r.d.Signal.Caught())
	case cancelled:
		return "the scheduled " + r.verb + " was cancelled by " + r.stoppedBy() + " (shutdown -c)"
	case queueRetry:
		return "the queued " + r.verb + " was not handed off: " + oneLine(errString(r.err))
	}
	return "nothing was shut down"
}

// errText says in words why the cluster could not be used, and what
// fixes it: the admin reads this line while the node goes down undrained.
func errText(err error, kubeconfig string) string {
	if kubeconfig == "" {
		kubeconfig = "the kubeconfig"
	}
	var se apierrors.APIStatus
	var ue *drain.UnreachableError
	var om *kube.OtherMachineError
	var ne *kube.NodeNameError
	switch {
	case errors.As(err, &om):
		return om.Error()
	case errors.As(err, &ne):
		return ne.Error()
	case apierrors.IsNotFound(err):
		return "the cluster has no Node " + notFoundName(err)
	case errors.As(err, &ue):
		return ue.Error()
	case apierrors.IsUnauthorized(err):
		return fmt.Sprintf("the API server does not accept the credentials in %s (401 Unauthorized): renew them (an expired kubelet client certificate?)", kubeconfig)
	case apierrors.IsForbidden(err) && strings.HasSuffix(kubeconfig, kube.GnshKubeconfig):
		// The drain's fallback (no kubelet kubeconfig where kubeadm, k3s
		// or rke2 keep it): the gate's identity, which the narrowed
		// rbac.yaml does not let drain.
		return fmt.Sprintf("the identity in %s is the reboot-slot gate's and may not drain (403 Forbidden: %s): "+
			"set kubeconfig in %s to this node's kubelet kubeconfig (gnsh found none at %s)",
			kubeconfig, statusMessage(err), config.Path, kube.KubeletKubeconfigList())
	case apierrors.IsForbidden(err):
		return fmt.Sprintf("the identity in %s may not drain this node (403 Forbidden: %s): use this node's kubelet kubeconfig, which may drain this node and no other "+
			"(gnsh's rbac.yaml grants only the reboot-slot gate's requests; 'gnsh doctor' says which kubeconfig each uses)",
			kubeconfig, statusMessage(err))
	case apierrors.IsTooManyRequests(err):
		return fmt.Sprintf("the API server is throttling requests (429 Too Many Requests: %s)", statusMessage(err))
	case errors.As(err, &se) && se.Status().Code >= 500:
		code := int(se.Status().Code)
		return fmt.Sprintf("the API server is failing (%d %s: %s)", code, http.StatusText(code), statusMessage(err))
	case drain.IsUnreachable(err):
		return fmt.Sprintf("API server unreachable (%v)", err)
	}
	return fmt.Sprintf("cannot drain (%v)", err)
}

func statusMessage(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) && se.Status().Message != "" {
		return se.Status().Message
	}
	return err.Error()
}

// notFoundName is the name in a NotFound status ("" if none).
func notFoundName(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) && se.Status().Details != nil {
		return se.Status().Details.Name
	}
	return ""
}

// sayAlreadyCordoned tells whose cordon was there before this drain; it
// stays whatever happens.
func (r *run) sayAlreadyCordoned(n *corev1.Node) {
	if o := drain.Owner(n); o != nil {
		r.info("%s was already cordoned by gnsh (%s requested by %s at %s); that cordon stays",
			n.Name, o.Request(), o.Requester(), o.Time.Local().Format("2006-01-02 15:04"))
		return
	}
	r.info("%s was already cordoned, not by gnsh; that cordon stays", n.Name)
}

// tellFar says why a shutdown scheduled for at, due beyond the drain
// timeout, is not drained now, and what will drain it: the node agent
// (gnsh.service) if it runs, drainTimeout (the config file's) ahead of it;
// else nothing.
func (r *run) tellFar(at time.Time, due time.Duration) {
	head := fmt.Sprintf("not draining now: the %s is due in %s, beyond the drain timeout (%s)", r.verb, roundDue(due), r.cfg.DrainTimeout.D())
	switch running, guarding := r.d.agentGuarding(); {
	case !running:
		r.info("%s, and the node agent (gnsh.service) is not running: nothing will drain the node before it; run 'gnsh drain' before it, or start the agent (systemctl enable --now gnsh.service; "+
			"where the Ansible role installs gnsh, set gnsh_agent: true, or its next run stops the agent again)", head)
		return
	case !guarding:
		// It runs, but has not found this node's kubeconfig yet (it looks
		// every few seconds) and guards nothing so far.
		r.info("%s, and the node agent (gnsh.service) has not taken this node up yet (no kubeconfig when it last looked): nothing promises a drain before it; check 'systemctl status gnsh' in a minute, or run 'gnsh drain' before it", head)
		return
	}
	start := at.Add(-r.agentTimeout)
	slot := ""
	if r.slotsLikely() {
		if r.cfg.Slots.Queue == config.QueueNever {
			slot = ", once it has a reboot slot (if none comes before the " + r.verb + "'s time, it cancels the " + r.verb + ")"
		} else {
			slot = ", once it has a reboot slot (if none comes before the " + r.verb + "'s time, it defers the " + r.verb +
				" until one does, within slots.queueFor: " + r.cfg.Slots.QueueFor.D().String() + ")"
		}
	}
	if !start.After(r.d.now()) {
		r.info("%s; the node agent (gnsh.service) will drain the node now (its drain timeout is %s)%s", head, r.agentTimeout, slot)
		return
	}
	r.info("%s; the node agent (gnsh.service) will drain the node at %s (%s before it)%s", head, start.Local().Format("2006-01-02 15:04:05 MST"), r.agentTimeout, slot)
}

// slotsLikely says whether the node agent's drain ahead of a schedule
// takes a reboot slot, as far as can be told without asking the API
// server: the gate is on, and required or used with gnsh's own identity
// (the kubelet's credentials cannot use it).
func (r *run) slotsLikely() bool {
	switch r.cfg.Slots.Gate {
	case config.GateOff:
		return false
	case config.GateRequired:
		return true
	}
	if r.d.Connect != nil {
		return true // tests: their own client
	}
	loc := r.d.locator(r.cfg)
	path, err := loc.FindKubeconfig()
	if err != nil {
		return false
	}
	path, err = loc.GateKubeconfig(path)
	return err == nil && !kube.IsKubeletKubeconfig(r.d.KubeRoot, path)
}

// roundDue is a due time for a line: whole seconds.
func roundDue(d time.Duration) time.Duration { return d.Round(time.Second) }

// summary is the one-line result of a finished drain.
func summary(r *drain.Result) string {
	if r == nil {
		return "nothing to do"
	}
	counts := map[drain.Verdict]int{}
	warned := 0
	for _, p := range r.Pods {
		counts[p.Verdict]++
		if p.Verdict == drain.Evict && p.Warning != "" {
			warned++
		}
	}
	parts := []string{plural(counts[drain.Evict], "pod") + " evicted"}
	var notes []string
	if warned > 0 {
		notes = append(notes, fmt.Sprintf("%d with warnings", warned))
	}
	if n := stoppedNote(r.Status); n != "" {
		notes = append(notes, n)
	}
	if len(notes) > 0 {
		parts[0] += " (" + strings.Join(notes, ", ") + ")"
	}
	if n := counts[drain.Terminating]; n > 0 {
		parts = append(parts, fmt.Sprintf("%d already terminating", n))
	}
	var left []string
	for _, v := range []drain.Verdict{drain.SkipDaemonSet, drain.SkipMirror, drain.SkipFinished, drain.Refused} {
		if n := counts[v]; n > 0 {
			if name, ok := strings.CutSuffix(v.String(), " pod"); ok {
				left = append(left, plural(n, name+" pod"))
			} else {
				left = append(left, fmt.Sprintf("%d %s", n, v))
			}
		}
	}
	if len(left) > 0 {
		parts = append(parts, "left: "+strings.Join(left, ", "))
	}
	return strings.Join(parts, "; ")
}

// stoppedNote says how many of the accepted evictions were of pods that
// had already stopped (kubelet stopped them, on a shutdown that bypassed
// gnsh, or they ended): "3 already stopped by kubelet", "2 already
// stopped", "3 already stopped, 2 by kubelet"; "" if none.
func stoppedNote(s drain.Status) string {
	switch n, k := s.AlreadyStopped, s.StoppedByKubelet; {
	case n == 0:
		return ""
	case k == n:
		return fmt.Sprintf("%d already stopped by kubelet", n)
	case k == 0:
		return fmt.Sprintf("%d already stopped", n)
	default:
		return fmt.Sprintf("%d already stopped, %d by kubelet", n, k)
	}
}

// plural is "1 pod", "2 pods".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func progressOf(r *drain.Result) string {
	if r == nil {
		return "no pods evicted"
	}
	return fmt.Sprintf("%d/%d pods gone", r.Status.Gone, r.Status.Total)
}
