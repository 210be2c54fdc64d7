package drain

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A podFilter looks at one pod. It either decides the pod's fate (sets
// p.Verdict and returns true: no later filter sees the pod) or passes it
// on (returns false), possibly after adding a warning. A pod that every
// filter passes is evicted.
//
// The idea is kubectl's pkg/drain/filters.go; the filters differ: no
// filter here reads anything but the pod itself (kubectl GETs the
// DaemonSet, which kubelet credentials may not), and nothing is refused:
// pods kubectl would refuse without --force or --delete-emptydir-data are
// evicted with a warning (and Pod.Kubectl says why kubectl refuses them).
// The node is going down: such a pod is lost with it anyway. With strict
// (config strictDrain), Classify refuses them as kubectl does.
type podFilter func(p *Pod) (decided bool)

// podFilters, in order. The order matters: a static pod is the kubelet's
// even while it is being deleted; a pod already being deleted is waited
// for, whatever it is; a finished pod is never evicted, whoever owns it.
var podFilters = []podFilter{
	mirrorFilter,
	terminatingFilter,
	finishedFilter,
	daemonSetFilter,
	unreplicatedFilter,
	emptyDirFilter,
}

// Classify decides a pod's fate from the pod alone, through podFilters:
// DaemonSet ownership is read from the controller ownerReference, never by
// GETting the DaemonSet (the kubelet's credentials may not). With strict,
// a pod kubectl drain refuses (Pod.Kubectl) is Refused instead of
// evicted.
func Classify(pod corev1.Pod, strict bool) Pod {
	p := Pod{Pod: pod, Verdict: Evict}
	for _, f := range podFilters {
		if f(&p) {
			break
		}
	}
	if strict && p.Verdict == Evict && p.Kubectl != "" {
		p.Verdict = Refused
	}
	return p
}

// kubectl adds why kubectl drain refuses the pod.
func (p *Pod) kubectl(why string) {
	if p.Kubectl != "" {
		why = p.Kubectl + ", " + why
	}
	p.Kubectl = why
}

// warn adds w to the pod's warnings.
func (p *Pod) warn(w string) {
	if p.Warning != "" {
		w = p.Warning + "; " + w
	}
	p.Warning = w
}

// mirrorFilter skips static pods: their API copy (the mirror pod) cannot
// be evicted, only the kubelet's manifest removes them.
func mirrorFilter(p *Pod) bool {
	if p.Pod.Annotations[MirrorAnnotation] == "" {
		return false
	}
	p.Verdict = SkipMirror
	return true
}

// terminatingFilter waits for pods already being deleted, without
// evicting them again.
func terminatingFilter(p *Pod) bool {
	if p.Pod.DeletionTimestamp == nil {
		return false
	}
	p.Verdict = Terminating
	return true
}

// finishedFilter skips Succeeded and Failed pods: nothing runs in them.
func finishedFilter(p *Pod) bool {
	if ph := p.Pod.Status.Phase; ph != corev1.PodSucceeded && ph != corev1.PodFailed {
		return false
	}
	p.Verdict = SkipFinished
	return true
}

// daemonSetFilter skips DaemonSet pods: the DaemonSet controller would
// recreate them on this node at once (it ignores the cordon).
func daemonSetFilter(p *Pod) bool {
	if ref := metav1.GetControllerOf(&p.Pod); ref == nil || ref.Kind != "DaemonSet" {
		return false
	}
	p.Verdict = SkipDaemonSet
	return true
}

// unreplicatedFilter warns about pods that no controller recreates
// elsewhere.
func unreplicatedFilter(p *Pod) bool {
	if metav1.GetControllerOf(&p.Pod) == nil {
		p.warn("declares no controller: it will not be recreated elsewhere")
		p.kubectl("declares no controller")
	}
	return false
}

// emptyDirFilter warns about pods whose emptyDir data dies with them.
func emptyDirFilter(p *Pod) bool {
	for _, v := range p.Pod.Spec.Volumes {
		if v.EmptyDir != nil {
			p.warn("uses emptyDir: its data is lost")
			p.kubectl("uses emptyDir")
			break
		}
	}
	return false
}
