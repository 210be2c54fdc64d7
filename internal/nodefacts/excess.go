package nodefacts

import (
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gnsh/gnsh/internal/gatetoken"
)

// ExcessRequests are rights the gate's identity (rbac.yaml's
// ServiceAccount) must NOT have: an earlier gnsh's rbac.yaml granted them
// (ClusterRole gnsh:drain: patch every Node, evict every pod; Role
// default/gnsh:events: post Events), and they are the drain's, the
// kubelet identity's (issue 22). kubectl apply of this rbac.yaml does not
// take them back (it never deletes an object); gnsh doctor asks for each
// by SelfSubjectAccessReview and fails when one is allowed.
func ExcessRequests() []APIRequest {
	return []APIRequest{
		{Verb: "patch", Resource: "nodes", For: "cordon any node"},
		{Verb: "create", Resource: "pods", Subresource: "eviction", For: "evict any pod"},
		{Verb: "create", Resource: "events", Namespace: metav1.NamespaceDefault, For: "post Events"},
	}
}

// EarlierRBACDelete are the commands that delete what an earlier gnsh's
// rbac.yaml made and this one no longer has (the Ansible role runs them).
const EarlierRBACDelete = "kubectl delete clusterrole,clusterrolebinding gnsh:drain --ignore-not-found; " +
	"kubectl -n default delete role,rolebinding gnsh:events --ignore-not-found"

// gateServiceAccount is the user name of rbac.yaml's ServiceAccount.
var gateServiceAccount = "system:serviceaccount:" + gatetoken.Namespace + ":" + gatetoken.ServiceAccount

// excessOf splits af's answers into the gate's own and those of
// ExcessRequests: excess lists the excess rights allowed to user, when
// user is rbac.yaml's ServiceAccount (another identity, an admin's say,
// is not judged by what gnsh's rbac.yaml grants); unknown those whose
// review failed.
func excessOf(af *AccessFacts) (excess []string) {
	isExcess := func(q APIRequest) bool { return slices.Contains(ExcessRequests(), q) }
	for _, q := range af.Allowed {
		if isExcess(q) && af.User == gateServiceAccount {
			excess = append(excess, q.String())
		}
	}
	af.Allowed = slices.DeleteFunc(af.Allowed, isExcess)
	af.Denied = slices.DeleteFunc(af.Denied, func(d Denial) bool { return isExcess(d.APIRequest) })
	af.Unknown = slices.DeleteFunc(af.Unknown, func(d Denial) bool { return isExcess(d.APIRequest) && af.User != gateServiceAccount })
	return excess
}

// excessCheck makes c fail when the gate's identity has rights of
// ExcessRequests, naming the commands that take them back.
func excessCheck(c *Check, sf SlotsFacts) {
	if sf.Excess == "" {
		return
	}
	c.Verdict = Fail
	c.Message += "; these credentials may also " + sf.Excess + ", which the gate never does: " +
		"a token taken from any node can cordon and drain every node (an earlier gnsh's rbac.yaml granted them)"
	fix := "delete what grants them (as a cluster admin): " + EarlierRBACDelete +
		"; or run the Ansible role gnsh again with gnsh_kubectl_kubeconfig (it deletes them); if they remain, another binding grants them: kubectl get clusterrolebindings,rolebindings -A -o wide | grep " + gateServiceAccount
	if strings.TrimSpace(c.Fix) != "" {
		fix = c.Fix + "; and " + fix
	}
	c.Fix = fix
}
