package nodefacts

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/kube"
)

// APIRequest is one kind of request gnsh sends to the API server, as a
// SelfSubjectAccessReview asks about it.
type APIRequest struct {
	Verb        string `json:"verb"`
	Group       string `json:"group,omitempty"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource,omitempty"`
	Namespace   string `json:"namespace,omitempty"` // "" = every namespace (or cluster-scoped)
	Name        string `json:"name,omitempty"`
	// FieldSelector is the request's field selector, such as
	// spec.nodeName=NODE (the Node authorizer lets a node list and watch
	// pods only with it) or metadata.name=NAME (which the API server
	// authorizes as a request for that name). LabelSelector is its label
	// selector (component=etcd).
	FieldSelector string `json:"fieldSelector,omitempty"`
	LabelSelector string `json:"labelSelector,omitempty"`
	// For says which of gnsh's steps sends it.
	For string `json:"for"`
	// Optional: gnsh does without it (a fallback), so a denial is a
	// warning, not a failure.
	Optional bool `json:"optional,omitempty"`
}

// String names the request as the doctor line does, e.g. "patch
// nodes/node1", "list pods (spec.nodeName=node1)", "get
// leases.coordination.k8s.io/node1 in kube-node-lease", "list pods
// (component=etcd) in kube-system".
func (q APIRequest) String() string {
	res := q.Resource
	if q.Group != "" {
		res += "." + q.Group
	}
	if q.Subresource != "" {
		res += "/" + q.Subresource
	}
	if q.Name != "" {
		res += "/" + q.Name
	}
	s := q.Verb + " " + res
	var sel []string
	for _, x := range []string{q.FieldSelector, q.LabelSelector} {
		if x != "" {
			sel = append(sel, x)
		}
	}
	if len(sel) > 0 {
		s += " (" + strings.Join(sel, ", ") + ")"
	}
	if q.Namespace != "" {
		s += " in " + q.Namespace
	}
	return s
}

// eventNamespace is where gnsh posts its Node Events (internal/drainer:
// metav1.NamespaceDefault, as kubectl describe node reads them).
const eventNamespace = metav1.NamespaceDefault

// GnshRequests lists every kind of request gnsh sends about node: the
// drain (internal/drain: cordon, pod list and watch, evictions, the
// kubelet check), its Events (internal/drainer), and the agent's uncordon
// after boot (internal/agent), the same calls again. Not listed: the list
// of all Nodes that resolving the node name from the host name falls back
// to when no Node is named like the host (the node check reports that).
func GnshRequests(node string, events bool) []APIRequest {
	pods := "spec.nodeName=" + node
	rs := []APIRequest{
		{Verb: "get", Resource: "nodes", Name: node, For: "read the Node (cordon, uncordon after boot)"},
		{Verb: "patch", Resource: "nodes", Name: node, For: "cordon and uncordon"},
		{Verb: "list", Resource: "pods", FieldSelector: pods, For: "list the node's pods"},
		{Verb: "watch", Resource: "pods", FieldSelector: pods, For: "wait for evicted pods to go"},
		// The pods' namespaces are not known ahead: in every namespace.
		{Verb: "create", Resource: "pods", Subresource: "eviction", For: "evict pods (PodDisruptionBudgets honoured)"},
		{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: corev1.NamespaceNodeLease, Name: node,
			For: "check that the kubelet is alive (else the Node's Ready condition is used)", Optional: true},
	}
	if events {
		rs = append(rs, APIRequest{Verb: "create", Resource: "events", Namespace: eventNamespace, For: "post Events about the Node"})
	}
	return rs
}

// SlotRequests lists the requests of the reboot-slot gate (internal/slots)
// on the Lease ns/name: read it, list and watch it (its informer, with a
// metadata.name field selector, which the API server authorizes as a
// request for that name), update it and create it once; read, list and
// watch the Nodes; list and watch the kubelets' heartbeat Leases in
// kube-node-lease (a holder whose kubelet still renews is up, not going
// down: optional, as the gate does without them); and, for every node, list
// the pods of kube-system: a node the gate guards as a control-plane node
// (controlPlane: labelled control-plane, master or etcd; slots.StateOf)
// counts the etcd members (the quorum guard); any other lists its own
// (does it host an etcd member? In doubt it is guarded, and then needs
// the members too) and the etcd members to judge whether a control-plane
// or etcd holder back on a new boot has settled. Reviewed as the etcd
// pods' list: RBAC cannot tell it from the node's own (a field selector)
// or from the unlabelled fallback's. leaseExists: the Lease is there, so
// creating it is not needed.
func SlotRequests(ns, name string, controlPlane, leaseExists bool) []APIRequest {
	const coord = "coordination.k8s.io"
	byName := "metadata.name=" + name
	rs := []APIRequest{
		{Verb: "get", Group: coord, Resource: "leases", Namespace: ns, Name: name, For: "read the reboot slots"},
		{Verb: "list", Group: coord, Resource: "leases", Namespace: ns, Name: name, FieldSelector: byName, For: "follow the reboot slots (a list, then a watch)"},
		{Verb: "watch", Group: coord, Resource: "leases", Namespace: ns, Name: name, FieldSelector: byName, For: "wait for a reboot slot"},
		{Verb: "update", Group: coord, Resource: "leases", Namespace: ns, Name: name, For: "take, renew and free a reboot slot"},
		{Verb: "create", Group: coord, Resource: "leases", Namespace: ns, For: "make the slots Lease (once)", Optional: leaseExists},
		{Verb: "get", Resource: "nodes", For: "read a holder's Node"},
		{Verb: "list", Resource: "nodes", For: "count the nodes out of service"},
		{Verb: "watch", Resource: "nodes", For: "follow the nodes out of service while waiting"},
		// Best effort in the gate: without them no holder counts as
		// given up (its node agent frees it).
		{Verb: "list", Group: coord, Resource: "leases", Namespace: corev1.NamespaceNodeLease, For: "follow a silent holder's kubelet heartbeat (up, or going down)", Optional: true},
		{Verb: "watch", Group: coord, Resource: "leases", Namespace: corev1.NamespaceNodeLease, For: "follow a silent holder's kubelet heartbeat while waiting", Optional: true},
	}
	etcd := APIRequest{Verb: "list", Resource: "pods", Namespace: metav1.NamespaceSystem, LabelSelector: EtcdSelector,
		For: "count the etcd members (the quorum guard of a control-plane or etcd node)"}
	if !controlPlane {
		etcd.For = "find whether this node hosts an etcd member, and whether a control-plane or etcd holder has settled"
	}
	return append(rs, etcd)
}

// EtcdSelector is the label selector the gate lists kube-system's static
// etcd pods with.
const EtcdSelector = "component=etcd"

// AccessFacts is what the API server says gnsh's identity may do.
type AccessFacts struct {
	// User is the identity as the API server sees it (SelfSubjectReview);
	// UserError why it could not be asked.
	User      string `json:"user,omitempty"`
	UserError string `json:"userError,omitempty"`
	// Allowed and Denied are the requests of GnshRequests by answer;
	// Unknown those whose review failed (Error of each).
	Allowed []APIRequest `json:"allowed,omitempty"`
	Denied  []Denial     `json:"denied,omitempty"`
	Unknown []Denial     `json:"unknown,omitempty"`
	// Error says why nothing was asked.
	Error string `json:"error,omitempty"`
}

// Denial is a request the identity may not make, with the authorizers'
// reason, or one the review of which failed.
type Denial struct {
	APIRequest
	Reason string `json:"reason,omitempty"`
}

// Reviewer asks the API server about the identity of a client.
type Reviewer interface {
	// Review answers whether q is allowed, and the authorizers' reason.
	Review(ctx context.Context, q APIRequest) (allowed bool, reason string, err error)
	// WhoAmI returns the user name the API server authenticates.
	WhoAmI(ctx context.Context) (string, error)
}

// ClientReviewer asks through a client: SelfSubjectAccessReview (with the
// request's field and label selectors, so the Node authorizer answers for
// a node's pod list as it would for the list) and SelfSubjectReview. Neither
// changes anything: the API server stores no review.
type ClientReviewer struct{ C kubernetes.Interface }

// Review implements Reviewer. The API server answers allowed, or not:
// "denied" only when an authorizer says no outright, which the Node
// authorizer and RBAC never do (they have "no opinion"); either way the
// request would be refused with 403, so both count as not allowed.
func (r ClientReviewer) Review(ctx context.Context, q APIRequest) (bool, string, error) {
	ra := &authzv1.ResourceAttributes{Verb: q.Verb, Group: q.Group, Resource: q.Resource, Subresource: q.Subresource,
		Namespace: q.Namespace, Name: q.Name}
	if q.FieldSelector != "" {
		ra.FieldSelector = &authzv1.FieldSelectorAttributes{RawSelector: q.FieldSelector}
	}
	if q.LabelSelector != "" {
		ra.LabelSelector = &authzv1.LabelSelectorAttributes{RawSelector: q.LabelSelector}
	}
	ssar := &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: ra}}
	res, err := r.C.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, ssar, metav1.CreateOptions{})
	if err != nil {
		return false, "", err
	}
	reason := res.Status.Reason
	if res.Status.EvaluationError != "" {
		reason = strings.TrimSpace(reason + " (" + res.Status.EvaluationError + ")")
	}
	return res.Status.Allowed, reason, nil
}

// WhoAmI implements Reviewer.
func (r ClientReviewer) WhoAmI(ctx context.Context) (string, error) {
	res, err := r.C.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return res.Status.UserInfo.Username, nil
}

// GatherAccess reviews every request side by side, each bounded by
// timeout, and asks who the identity is.
func GatherAccess(ctx context.Context, rv Reviewer, reqs []APIRequest, timeout time.Duration) AccessFacts {
	var f AccessFacts
	type answer struct {
		allowed bool
		reason  string
		err     error
	}
	answers := make([]answer, len(reqs))
	var wg sync.WaitGroup
	wg.Go(func() {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		u, err := rv.WhoAmI(cctx)
		f.User, f.UserError = u, errString(timeoutError(err, timeout))
	})
	for i, q := range reqs {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			a := &answers[i]
			a.allowed, a.reason, a.err = rv.Review(cctx, q)
			a.err = timeoutError(a.err, timeout)
		})
	}
	wg.Wait()
	for i, a := range answers {
		switch {
		case a.err != nil:
			f.Unknown = append(f.Unknown, Denial{APIRequest: reqs[i], Reason: a.err.Error()})
		case a.allowed:
			f.Allowed = append(f.Allowed, reqs[i])
		default:
			f.Denied = append(f.Denied, Denial{APIRequest: reqs[i], Reason: a.reason})
		}
	}
	return f
}

func timeoutError(err error, timeout time.Duration) error {
	if err != nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("the API server did not answer within %s: %w", timeout, err)
	}
	return err
}

// CheckAccess: may the drain's identity make every request the drain
// makes? (The gate's identity is reviewed by CheckSlots.)
func CheckAccess(r *Report) Check {
	c := Check{Name: "API access"}
	a := r.Access
	switch {
	case a == nil || a.Error != "":
		why := "no kubeconfig"
		if a != nil {
			why = a.Error
		}
		c.Verdict, c.Message = Warn, "not checked: "+why
		if r.Kubeconfig.Found && r.Kubeconfig.Error == "" {
			c.Fix = "see the kubeconfig and node checks"
		}
		return c
	}
	as := a.User
	if as == "" {
		as = "this kubeconfig's identity"
		if n := r.Node.Name; n != "" && r.Node.NameFrom == "certificate" {
			as = "system:node:" + n
		}
	}
	// who names the drain's identity and its kubeconfig for the lines:
	// "drain: system:node:n1 from /etc/kubernetes/kubelet.conf (confined
	// to this node)".
	who := "drain: " + as
	if p := r.Kubeconfig.Path; p != "" {
		who += " from " + p
	}
	switch {
	case strings.HasPrefix(as, "system:node:"):
		who += " (confined to this node)"
	case r.Kubeconfig.Fallback:
		who += " (gnsh's own, for want of a kubelet kubeconfig at " + kube.KubeletKubeconfigList() + ")"
	}
	var required, optional []string
	for _, d := range a.Denied {
		s := d.String()
		if d.Reason != "" {
			s += " (" + d.Reason + ")"
		}
		if d.Optional {
			optional = append(optional, s)
		} else {
			required = append(required, s)
		}
	}
	switch {
	case len(required) > 0:
		c.Verdict = Fail
		c.Message = fmt.Sprintf("%s: the API server refuses %s: gnsh cannot drain this node", who, strings.Join(required, ", "))
		if len(optional) > 0 {
			c.Message += "; and " + strings.Join(optional, ", ") + " (gnsh does without it)"
		}
		c.Fix = accessFix(r.Install, as)
	case len(a.Unknown) > 0 && len(a.Allowed) == 0:
		c.Verdict = Warn
		c.Message = "cannot ask the API server (SelfSubjectAccessReview): " + a.Unknown[0].Reason
		c.Fix = "check that the API server answers (see the node check)"
	case len(a.Unknown) > 0:
		var us []string
		for _, u := range a.Unknown {
			us = append(us, u.String()+": "+u.Reason)
		}
		c.Verdict = Warn
		c.Message = fmt.Sprintf("%s: %d requests allowed, not answered for %s", who, len(a.Allowed), strings.Join(us, "; "))
		c.Fix = "run gnsh doctor again"
	case len(optional) > 0:
		var why []string
		for _, d := range a.Denied {
			why = append(why, d.For)
		}
		c.Verdict = Warn
		c.Message = fmt.Sprintf("%s: every request the drain needs is allowed, but not %s: gnsh does without it (%s)",
			who, strings.Join(optional, ", "), strings.Join(why, "; "))
		c.Fix = accessFix(r.Install, as)
	default:
		c.Verdict = OK
		c.Message = fmt.Sprintf("%s: every request the drain makes is allowed (%d checked by SelfSubjectAccessReview)", who, len(a.Allowed))
	}
	return c
}

// accessFix says how to grant the drain's requests to user: they are the
// kubelet identity's (rbac.yaml grants only the gate's, issue 22).
func accessFix(_ InstallFacts, user string) string {
	if node, ok := strings.CutPrefix(user, "system:node:"); ok {
		return "the kubelet's identity " + user + " is allowed all of these by the Node authorizer: run kube-apiserver with " +
			"--authorization-mode=Node,RBAC (kubeadm's default), and check that the Node is named " + node
	}
	return "drain with this node's kubelet kubeconfig, which may drain this node and no other: leave kubeconfig unset in " +
		config.Path + " where the kubelet's is at " + kube.KubeletKubeconfigList() + " (kubeadm, k3s, rke2), else set it to the kubelet's; " +
		"gnsh's rbac.yaml grants only the reboot-slot gate's requests"
}
