package slots

import "slices"

// Which nodes host an etcd member, and the members, in the layouts gnsh
// recognises:
//
//   - kubeadm: control-plane nodes labelled
//     node-role.kubernetes.io/control-plane (node-role.kubernetes.io/master
//     before Kubernetes 1.20), each with a static pod etcd-NODE in
//     kube-system (labelled component=etcd), unless etcd is external;
//   - RKE2: servers labelled node-role.kubernetes.io/control-plane=true
//     (and master=true) and/or node-role.kubernetes.io/etcd=true (an
//     etcd-only server has the etcd label alone), each etcd one with a
//     static pod etcd-NODE (component=etcd);
//   - k3s with its embedded etcd: servers labelled etcd=true (and
//     control-plane, master); etcd runs inside the k3s process, with no pod.
//
// A node so labelled, or hosting an etcd pod, is guarded as a
// control-plane node (NodeState.ControlPlane): one at a time among them,
// and only while etcd keeps its quorum.

// MasterLabel is the control-plane label before Kubernetes 1.20
// (kubeadm's until 1.24; RKE2 and k3s still set it).
const MasterLabel = "node-role.kubernetes.io/master"

// EtcdLabel marks a node that runs an etcd member (RKE2, k3s).
const EtcdLabel = "node-role.kubernetes.io/etcd"

// hasRole reports whether a role label is set: kubeadm sets it to "",
// RKE2 and k3s to "true"; "false" is not the role.
func hasRole(labels map[string]string, key string) bool {
	v, ok := labels[key]
	return ok && v != "false"
}

// setEtcd records in w the etcd pods as read (EtcdKnown) and what they and
// the labels say about the members, one per node: each node that hosts an
// etcd pod is guarded, and each Node labelled etcd that has no pod is a
// member too. A pod on a node that is not a Node stays a member (quorum
// counts it as down).
// With no etcd pod in the cluster (k3s's embedded etcd) such a member is
// as Ready as its Node; beside the pods of other members (kubeadm, RKE2)
// its pod not seen (not started yet, its mirror pod not made yet) is a
// member that is not Ready. Nothing else of w changes but the flags of
// its Nodes (w.Nodes is the caller's own map).
func (w *World) setEtcd(pods []Member) {
	var ms []Member
	hosts := map[string]int{} // node: its member's index in ms
	for _, m := range pods {
		// One member per node: a node has one etcd member, however many
		// pods claim it (an old mirror pod beside the new one); it is
		// Ready only if each of them is.
		if i, ok := hosts[m.Node]; ok {
			if ms[i].Ready && !m.Ready {
				ms[i] = m
			}
			continue
		}
		hosts[m.Node] = len(ms)
		ms = append(ms, m)
		if s, ok := w.Nodes[m.Node]; ok && !s.ControlPlane {
			s.ControlPlane = true
			w.Nodes[m.Node] = s
		}
	}
	var labelled []string
	for _, s := range w.Nodes {
		if _, ok := hosts[s.Name]; s.EtcdRole && !ok {
			labelled = append(labelled, s.Name)
		}
	}
	slices.Sort(labelled)
	for _, name := range labelled {
		s := w.Nodes[name]
		ms = append(ms, Member{Pod: labelMember(name), Node: name, Ready: s.Ready && len(pods) == 0})
	}
	w.Etcd, w.EtcdKnown = ms, true
}

// labelMember names the member of a Node labelled etcd with no pod.
func labelMember(node string) string { return "etcd on " + node }

// notReady says why member m, not Ready, is: a pod not Ready, a labelled
// Node's pod not seen beside other members' pods, or (no etcd pods at
// all: k3s) its Node NotReady.
func (w World) notReady(m Member) string {
	if m.Pod != labelMember(m.Node) {
		return "not Ready"
	}
	for _, o := range w.Etcd {
		if o.Pod != labelMember(o.Node) {
			return "labelled etcd, no etcd pod seen"
		}
	}
	return "its Node is NotReady"
}
