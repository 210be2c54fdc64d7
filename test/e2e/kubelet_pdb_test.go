//go:build e2e

package e2e

// The bypass path with a budget that allows no eviction: does kubelet's
// Graceful Node Shutdown keep a PodDisruptionBudget? (It does not: it
// kills every pod on the node whatever the budget allows; the API server
// refuses the agent's evictions while the pods are Running in the API and
// accepts them once kubelet has written their terminal phase, because a
// terminal pod's eviction ignores budgets.) In kubernetes v1.37.1:
// canIgnorePDB in pkg/registry/core/pod/storage/eviction.go (Succeeded,
// Failed, Pending or deleting: no budget check), the pod strategy's
// CheckGracefulDelete (a terminal pod is deleted at once), and the
// kubelet's mergePodStatus (pkg/kubelet/status), which holds back the
// DisruptionTarget condition and the terminal phase until every container
// has stopped: the pod stays Running and Ready in the API meanwhile.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// strictMinAvailable: the 3 web pods on the node and the peer's: the
// budget `web` then allows no disruption at all.
const strictMinAvailable = drainWebPods + 1

// strictBudget raises the PDB web's minAvailable to strictMinAvailable
// and waits until the disruption controller has processed it
// (observedGeneration current, currentHealthy and desiredHealthy 4,
// disruptionsAllowed 0).
func (a *agentRun) strictBudget() {
	t := a.t
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pdbs := a.d.admin.PolicyV1().PodDisruptionBudgets(a.d.ns)
	pdb, err := pdbs.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	floor := intstr.FromInt32(strictMinAvailable)
	pdb.Spec.MinAvailable = &floor
	if _, err := pdbs.Update(ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("PDB web: minAvailable %d: %v", strictMinAvailable, err)
	}
	for {
		p, err := pdbs.Get(ctx, "web", metav1.GetOptions{})
		if err == nil {
			s := p.Status
			if s.ObservedGeneration == p.Generation && s.CurrentHealthy == strictMinAvailable && s.DesiredHealthy == strictMinAvailable && s.DisruptionsAllowed == 0 {
				a.c.logf("PDB web: minAvailable %d processed (generation %d): currentHealthy %d, desiredHealthy %d, disruptionsAllowed 0",
					strictMinAvailable, p.Generation, s.CurrentHealthy, s.DesiredHealthy)
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("PDB web not processed after 60 s: observedGeneration %d/%d, currentHealthy %d, desiredHealthy %d, disruptionsAllowed %d",
					s.ObservedGeneration, p.Generation, s.CurrentHealthy, s.DesiredHealthy, s.DisruptionsAllowed)
			}
		} else if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// evictTry is one eviction request as the API server answered it: when
// it was received and answered (audit), the answer.
type evictTry struct {
	recv, at time.Time
	code     int
}

// receivedAt is the audit event's requestReceivedTimestamp (the API
// server's; its stageTimestamp is when the answer was complete).
func receivedAt(e auditEvent) time.Time {
	var r struct {
		At metav1.MicroTime `json:"requestReceivedTimestamp"`
	}
	if json.Unmarshal(e.raw, &r) != nil || r.At.IsZero() {
		return e.StageTimestamp.Time
	}
	return r.At.Time
}

var (
	statusPhase = regexp.MustCompile(`"phase":"(Succeeded|Failed)"`)
	// kubelet's patch leaves out "status" when the condition is True
	// already (an accepted eviction set it), and sets only the reason.
	statusReason = regexp.MustCompile(`"reason":"([^"]+)",(?:"status":"True",)?"type":"DisruptionTarget"`)
)

// kubeletStatusWrites returns, per pod of the case's namespace, when the
// API server completed kubelet's first pods/status write carrying the
// DisruptionTarget condition and the first carrying a terminal phase (and
// when it received that one), and what that write said ("Succeeded,
// DisruptionTarget TerminationByKubelet"; the audit policy logs pods/status
// writes with their body).
func (a *agentRun) kubeletStatusWrites(from, to time.Time) (disruption, terminal, terminalRecv map[string]time.Time, said map[string]string) {
	disruption, terminal, terminalRecv, said = map[string]time.Time{}, map[string]time.Time{}, map[string]time.Time{}, map[string]string{}
	for _, e := range a.audit(from, to) {
		r := e.ObjectRef
		if r.Resource != "pods" || r.Subresource != "status" || r.Namespace != a.d.ns || e.User.Username != a.nodeUsr || e.ResponseStatus.Code != 200 {
			continue
		}
		at := e.StageTimestamp.Time
		if _, seen := disruption[r.Name]; !seen && bytes.Contains(e.raw, []byte(`"DisruptionTarget"`)) {
			disruption[r.Name] = at
		}
		if _, seen := terminal[r.Name]; !seen {
			if m := statusPhase.FindSubmatch(e.raw); m != nil {
				terminal[r.Name] = at
				terminalRecv[r.Name] = receivedAt(e)
				said[r.Name] = string(m[1])
				if m := statusReason.FindSubmatch(e.raw); m != nil {
					said[r.Name] += ", DisruptionTarget " + string(m[1])
				}
			}
		}
	}
	return disruption, terminal, terminalRecv, said
}

// kubeletBypassPDB: systemctl reboot, the agent running, the wrapper not
// used, the budget allowing no eviction. Asserted: the agent tried to
// evict; no web pod's eviction was accepted while the pod was still
// Running in the API (an accepted one comes after kubelet's write of its
// terminal phase: a terminal pod's eviction ignores budgets); kubelet
// killed all 3 web pods anyway; down with 133. Measured (bypass.txt):
// from kubelet's first kill to the container down (fewer web pods serving
// than minAvailable all that time), the refusals, the pods' final state,
// when the agent released its lock.
func kubeletBypassPDB(a *agentRun) {
	t, c := a.t, a.c
	a.strictBudget()
	trigger := a.reboot("systemctl", "reboot")
	pfs, ok := pfsAfter(c, trigger)
	if !ok {
		t.Fatalf("no PrepareForShutdown(true) after systemctl reboot")
	}
	da := a.drainAudit(trigger, c.exitAt)
	tries := map[string][]evictTry{}
	var firstEvict time.Time
	for _, e := range a.audit(trigger, c.exitAt) {
		r := e.ObjectRef
		if r.Resource == "pods" && r.Subresource == "eviction" && r.Namespace == a.d.ns && e.Verb == "create" {
			tries[r.Name] = append(tries[r.Name], evictTry{recv: receivedAt(e), at: e.StageTimestamp.Time, code: e.ResponseStatus.Code})
			if firstEvict.IsZero() {
				firstEvict = e.StageTimestamp.Time
			}
		}
	}
	disruption, terminal, terminalRecv, said := a.kubeletStatusWrites(trigger, c.exitAt)
	stops := firstStop(a.criCalls(trigger))
	kj := a.hostJournal("-u", "kubelet.service")
	event, evOK := journalAt(kj, kubeletShutdownLine, trigger)
	if !evOK {
		t.Errorf("kubelet did not log %q", kubeletShutdownLine)
	}
	kills := kubeletKills(kj, trigger)
	states, _ := a.podStates()
	c.logf("pods when the container was down: %v", states)
	aj := a.hostJournal("-u", agentUnit)
	released, relOK := journalAt(aj, "released the delay lock: systemd-logind goes on", trigger)
	drainEnd, endOK := journalAt(aj, "drain for the shutdown ended:", trigger)
	drained, drOK := journalAt(aj, "drained "+a.d.node+" in ", trigger)

	var b strings.Builder
	fmt.Fprintf(&b, "suite %s, systemctl reboot, kubelet shutdownGracePeriod %ds (critical %ds), pods' grace %ds, PDB minAvailable %d over %d web pods (1 on a peer Node): no disruption allowed\n",
		a.suite, kubeletGrace, kubeletCritical, drainGrace, strictMinAvailable, drainWebPods+1)
	fmt.Fprintf(&b, "clock: the API server's audit timestamps (evictions, kubelet's pods/status writes), kubelet's klog times (its kills), fakecri's own times (StopContainer), dbus-monitor (PrepareForShutdown), the journal (the agent's lines): one host clock; times relative to PrepareForShutdown\n")
	var firstKill time.Time
	killedWeb := 0
	refused, refusedTerminal, accepted, other, acceptedRunning := 0, 0, 0, 0, 0
	ends := map[string]time.Time{}
	for _, p := range a.d.webOnNode {
		kill, killed := kills[p]
		if !killed {
			t.Errorf("kubelet did not kill web pod %s (no \"Shutdown manager killing pod\" line): want every web pod killed whatever the budget allows", p)
		} else {
			killedWeb++
			if firstKill.IsZero() || kill.Before(firstKill) {
				firstKill = kill
			}
		}
		var ans []string
		for _, tr := range tries[p] {
			switch tr.code {
			case 429:
				refused++
				// A terminal pod's eviction ignores budgets: once
				// kubelet's write of the phase is complete, a request
				// received after it is not refused.
				if term, ok := terminal[p]; ok && term.Before(tr.recv) {
					refusedTerminal++
					t.Errorf("pod %s: eviction received at %s refused, after kubelet's write of its terminal phase (%s)", p, relTo(tr.recv, true, pfs), relTo(term, true, pfs))
				}
			case 201:
				accepted++
				// The budget allows nothing: the API server may accept it
				// only for a pod that is terminal (phase written by
				// kubelet) or already deleting (nobody deletes here).
				// (An answer complete before kubelet's write was even
				// received cannot have seen its phase.)
				recv, ok := terminalRecv[p]
				if !ok || tr.at.Before(recv) {
					acceptedRunning++
					t.Errorf("pod %s: eviction accepted at %s, before kubelet wrote a terminal phase (%s): the budget allows no disruption",
						p, relTo(tr.at, true, pfs), relTo(recv, ok, pfs))
				}
			default:
				other++
			}
			ans = append(ans, fmt.Sprintf("%s %d", relTo(tr.at, true, pfs), tr.code))
		}
		for _, at := range []time.Time{kill, stops[p], da.accepted[p]} {
			if !at.IsZero() && (ends[p].IsZero() || at.Before(ends[p])) {
				ends[p] = at
			}
		}
		fmt.Fprintf(&b, "pod %s: kubelet's kill %s, StopContainer %s, kubelet's DisruptionTarget status %s, terminal phase %s (%s); evictions [%s]; state when down %q\n", p,
			relTo(kill, killed, pfs), relTo(stops[p], !stops[p].IsZero(), pfs), relTo(disruption[p], !disruption[p].IsZero(), pfs),
			relTo(terminal[p], !terminal[p].IsZero(), pfs), said[p], strings.Join(ans, ", "), stateOrGone(states, p))
	}
	webTries := 0
	for _, p := range a.d.webOnNode {
		webTries += len(tries[p])
	}
	if webTries == 0 {
		t.Errorf("no eviction request for a web pod reached the API server: the agent did not try to drain")
	}
	if !strings.Contains(c.consoleText(), "shutdown under way that bypassed gnsh: draining within") {
		t.Errorf("the agent did not say it drains the shutdown that bypassed gnsh")
	}
	endLine := a.expectBypassAgent(trigger)
	fmt.Fprintf(&b, "the agent's drain ended: %s\n", endLine)
	// Its evictions were accepted only once kubelet had written the pods'
	// terminal phase, which the drain's watch sees before the deletion:
	// its summary must say so, not a plain "3 pods evicted".
	if strings.Contains(endLine, "drained ") && !strings.Contains(endLine, "already stopped") {
		t.Errorf("the agent's summary does not say that kubelet had stopped the pods it evicted: %s", endLine)
	}
	under, none := servingGaps(a.d.webOnNode, ends, 1, strictMinAvailable, c.exitAt)
	// How long the API still showed each killed pod Running (kubelet's kill
	// → its terminal-phase write), and how long the agent held its lock
	// after the last of those writes (its evictions' retry backoff).
	var lastTerminal time.Time
	var inAPI []string
	for _, p := range a.d.webOnNode {
		if term, ok := terminal[p]; ok {
			if term.After(lastTerminal) {
				lastTerminal = term
			}
			if kill, ok := kills[p]; ok {
				inAPI = append(inAPI, fmt.Sprintf("%.3f", term.Sub(kill).Seconds()))
			}
		}
	}
	held := "-"
	if relOK && !lastTerminal.IsZero() {
		held = fmt.Sprintf("%.3f s", released.Sub(lastTerminal).Seconds())
	}
	fromKill := time.Duration(0)
	if !firstKill.IsZero() {
		fromKill = c.exitAt.Sub(firstKill)
	}
	fmt.Fprintf(&b, "PrepareForShutdown → kubelet's shutdown event %s, → first kill %s, → agent's first eviction %s; agent: drained %s, drain ended %s, released its lock %s; container down %s (%.2f s after systemctl reboot)\n",
		relTo(event, evOK, pfs), relTo(firstKill, !firstKill.IsZero(), pfs), relTo(firstEvict, !firstEvict.IsZero(), pfs),
		relTo(drained, drOK, pfs), relTo(drainEnd, endOK, pfs), relTo(released, relOK, pfs), relTo(c.exitAt, true, pfs), a.row.reboot.Seconds())
	fmt.Fprintf(&b, "web-pod evictions: %d requests, %d refused (429; %d of them received after kubelet's terminal-phase write of the pod was complete), %d accepted (%d of them answered before that write was received), %d other answers\n",
		webTries, refused, refusedTerminal, accepted, acceptedRunning, other)
	for _, l := range strings.Split(c.consoleText(), "\n") {
		if i := strings.Index(l, "gnsh: drained "+a.d.node+" in "); i >= 0 {
			fmt.Fprintf(&b, "the agent's summary: %s\n", strings.TrimSpace(l[i:]))
		}
	}
	fmt.Fprintf(&b, "kubelet's kill → its terminal-phase write (the pod Running in the API meanwhile): [%s] s; the agent released its lock %s after the last terminal-phase write\n",
		strings.Join(inAPI, " "), held)
	fmt.Fprintf(&b, "from kubelet's first kill to the container down: %.3f s; longest time with fewer web pods serving than minAvailable %d (the peer's counted): %.3f s; none of the node's %d serving: %.3f s\n",
		fromKill.Seconds(), strictMinAvailable, under.Seconds(), drainWebPods, none.Seconds())
	_ = os.WriteFile(filepath.Join(a.dir, "bypass.txt"), []byte(b.String()), 0o644)
	c.logf("bypass measurement with a budget allowing no eviction (bypass.txt):\n%s", b.String())

	lines := []string{}
	if evOK {
		lines = append(lines, fmt.Sprintf("%+8.3fs kubelet: %s (journal)", event.Sub(trigger).Seconds(), kubeletShutdownLine))
	}
	for p, at := range kills {
		lines = append(lines, fmt.Sprintf("%+8.3fs kubelet: Shutdown manager killing pod %s (journal)", at.Sub(trigger).Seconds(), p))
	}
	for _, cc := range a.criCalls(trigger) {
		lines = append(lines, fmt.Sprintf("%+8.3fs fakecri: %s %s", cc.at.Sub(trigger).Seconds(), cc.call, cc.pod))
	}
	for _, w := range []struct {
		at   time.Time
		ok   bool
		what string
	}{{released, relOK, "released the delay lock"}, {drainEnd, endOK, "drain for the shutdown ended"}, {drained, drOK, "drained"}} {
		if w.ok {
			lines = append(lines, fmt.Sprintf("%+8.3fs gnsh agent: %s (journal)", w.at.Sub(trigger).Seconds(), w.what))
		}
	}
	sort.Strings(lines)
	a.timeline(trigger, pfs, drainAudit{lines: append(da.lines, lines...)})

	note := fmt.Sprintf("bypass_pdb %s: kubelet killed %d/%d web pods; %d eviction requests, %d refused (429), %d accepted (%d before kubelet's terminal phase); kill→terminal write [%s] s; lock released %s after the last; first kill→down %.3f s (below minAvailable %d: %.3f s); PFS→first kill %s, →agent eviction %s, →agent released lock %s; final %v; down in %.2f s; agent: %q",
		a.suite, killedWeb, drainWebPods, webTries, refused, accepted, acceptedRunning, strings.Join(inAPI, " "), held, fromKill.Seconds(), strictMinAvailable, under.Seconds(),
		relTo(firstKill, !firstKill.IsZero(), pfs), relTo(firstEvict, !firstEvict.IsZero(), pfs), relTo(released, relOK, pfs), finalStates(a.d.webOnNode, states), a.row.reboot.Seconds(), endLine)
	kubeletRowsMu.Lock()
	kubeletNotes = append(kubeletNotes, note)
	kubeletRowsMu.Unlock()
	a.row.what = fmt.Sprintf("PDB allows 0: kubelet killed %d/%d; %d evictions refused, %d accepted once terminal; below minAvailable %.2f s", killedWeb, drainWebPods, refused, accepted, under.Seconds())
}

func stateOrGone(states map[string]string, p string) string {
	if s, ok := states[p]; ok {
		return s
	}
	return "gone (deleted)"
}

func finalStates(pods []string, states map[string]string) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p+": "+stateOrGone(states, p))
	}
	return out
}
