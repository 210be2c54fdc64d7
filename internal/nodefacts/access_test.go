package nodefacts

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestAPIRequestString(t *testing.T) {
	want := []string{
		"get nodes/n1", "patch nodes/n1", "list pods (spec.nodeName=n1)", "watch pods (spec.nodeName=n1)",
		"create pods/eviction", "get leases.coordination.k8s.io/n1 in kube-node-lease", "create events in default",
	}
	var got []string
	for _, q := range GnshRequests("n1", true) {
		got = append(got, q.String())
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if got := (APIRequest{Verb: "list", Resource: "pods", Namespace: "kube-system", LabelSelector: "component=etcd"}).String(); got != "list pods (component=etcd) in kube-system" {
		t.Errorf("label selector: %q", got)
	}
}

// SlotRequests: every request the gate sends, the pods of kube-system for
// every node (issue 20: every node's gate lists them, to learn whether it
// hosts an etcd member or to judge a control-plane holder; it used to be
// reviewed for a control-plane node only), creating the Lease required
// only while there is none.
func TestSlotRequests(t *testing.T) {
	want := []string{
		"get leases.coordination.k8s.io/s in ns",
		"list leases.coordination.k8s.io/s (metadata.name=s) in ns",
		"watch leases.coordination.k8s.io/s (metadata.name=s) in ns",
		"update leases.coordination.k8s.io/s in ns",
		"create leases.coordination.k8s.io in ns",
		"get nodes", "list nodes", "watch nodes",
		"list leases.coordination.k8s.io in kube-node-lease",
		"watch leases.coordination.k8s.io in kube-node-lease",
		"list pods (component=etcd) in kube-system",
	}
	for _, cp := range []bool{false, true} {
		for _, exists := range []bool{false, true} {
			var got []string
			optional := 0
			for _, q := range SlotRequests("ns", "s", cp, exists) {
				got = append(got, q.String())
				switch {
				case q.Optional && q.Namespace == "kube-node-lease":
					// the heartbeats: the gate does without them
				case q.Optional:
					optional++
					if q.Verb != "create" {
						t.Errorf("%s optional", q)
					}
				case q.Namespace == "kube-node-lease":
					t.Errorf("%s required", q)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("control plane %v: got %q\nwant %q", cp, got, want)
			}
			if (optional == 1) != exists {
				t.Errorf("Lease there %v: %d optional", exists, optional)
			}
		}
	}
	if n := len(GnshRequests("n1", false)); n != 6 {
		t.Errorf("without events: %d requests", n)
	}
}

// fakeReviewer answers from a table by the request's String, records the
// requests, and can hang.
type fakeReviewer struct {
	mu      sync.Mutex
	allowed map[string]bool
	reasons map[string]string
	errs    map[string]error
	hang    map[string]bool
	user    string
	userErr error
	seen    []APIRequest
}

func (f *fakeReviewer) Review(ctx context.Context, q APIRequest) (bool, string, error) {
	f.mu.Lock()
	f.seen = append(f.seen, q)
	f.mu.Unlock()
	k := q.String()
	if f.hang[k] {
		<-ctx.Done()
		return false, "", ctx.Err()
	}
	return f.allowed[k], f.reasons[k], f.errs[k]
}

func (f *fakeReviewer) WhoAmI(context.Context) (string, error) { return f.user, f.userErr }

func TestGatherAccess(t *testing.T) {
	reqs := GnshRequests("n1", true)
	all := map[string]bool{}
	for _, q := range reqs {
		all[q.String()] = true
	}
	for _, tt := range []struct {
		name                      string
		f                         *fakeReviewer
		allowed, denied, unknown  int
		user, userErr, firstError string
	}{
		{"all allowed", &fakeReviewer{allowed: all, user: "system:node:n1"}, 7, 0, 0, "system:node:n1", "", ""},
		{"none allowed", &fakeReviewer{user: "stranger", reasons: map[string]string{"patch nodes/n1": "no rule"}}, 0, 7, 0, "stranger", "", ""},
		{"reviews refused", &fakeReviewer{userErr: errors.New("401"),
			errs: map[string]error{"get nodes/n1": errors.New("Unauthorized"), "create events in default": errors.New("Unauthorized")}},
			0, 5, 2, "", "401", "Unauthorized"},
		{"one hangs", &fakeReviewer{allowed: all, user: "u", hang: map[string]bool{"watch pods (spec.nodeName=n1)": true}},
			6, 0, 1, "u", "", "the API server did not answer within 200ms: context deadline exceeded"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			a := GatherAccess(testCtx(t), tt.f, reqs, 200*time.Millisecond)
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %s: the reviews are not side by side, or not bounded", d)
			}
			if len(a.Allowed) != tt.allowed || len(a.Denied) != tt.denied || len(a.Unknown) != tt.unknown ||
				a.User != tt.user || a.UserError != tt.userErr {
				t.Fatalf("%+v", a)
			}
			if tt.firstError != "" && a.Unknown[0].Reason != tt.firstError {
				t.Errorf("unknown %+v", a.Unknown)
			}
			if tt.name == "none allowed" && (a.Denied[1].String() != "patch nodes/n1" || a.Denied[1].Reason != "no rule") {
				t.Errorf("denied in order with reasons: %+v", a.Denied)
			}
			if len(tt.f.seen) != len(reqs) {
				t.Errorf("%d reviews for %d requests", len(tt.f.seen), len(reqs))
			}
		})
	}
}

// ClientReviewer sends each request as a SelfSubjectAccessReview with its
// field selector, and reads the answer and the reason.
func TestClientReviewer(t *testing.T) {
	c := fake.NewClientset()
	var got []authzv1.ResourceAttributes
	c.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authzv1.SelfSubjectAccessReview)
		got = append(got, *r.Spec.ResourceAttributes)
		r.Status = authzv1.SubjectAccessReviewStatus{Allowed: r.Spec.ResourceAttributes.Verb != "patch", Reason: "rule " + r.Spec.ResourceAttributes.Verb,
			EvaluationError: map[bool]string{true: "webhook down"}[r.Spec.ResourceAttributes.Verb == "patch"]}
		return true, r, nil
	})
	c.PrependReactor("create", "selfsubjectreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authnv1.SelfSubjectReview{Status: authnv1.SelfSubjectReviewStatus{UserInfo: authnv1.UserInfo{Username: "system:node:n1"}}}, nil
	})
	rv := ClientReviewer{C: c}
	reqs := GnshRequests("n1", true)
	ok, reason, err := rv.Review(testCtx(t), reqs[2]) // list pods
	if !ok || reason != "rule list" || err != nil {
		t.Errorf("list: %v %q %v", ok, reason, err)
	}
	ok, reason, err = rv.Review(testCtx(t), reqs[1]) // patch nodes
	if ok || reason != "rule patch (webhook down)" || err != nil {
		t.Errorf("patch: %v %q %v", ok, reason, err)
	}
	if _, _, err := rv.Review(testCtx(t), reqs[5]); err != nil {
		t.Fatal(err)
	}
	sreqs := SlotRequests("gnsh", "reboot-slots", true, false)
	for _, q := range []APIRequest{sreqs[1], sreqs[len(sreqs)-1]} { // list the Lease by name; list the etcd pods
		if _, _, err := rv.Review(testCtx(t), q); err != nil {
			t.Fatal(err)
		}
	}
	want := []authzv1.ResourceAttributes{
		{Verb: "list", Resource: "pods", FieldSelector: &authzv1.FieldSelectorAttributes{RawSelector: "spec.nodeName=n1"}},
		{Verb: "patch", Resource: "nodes", Name: "n1"},
		{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease", Name: "n1"},
		{Verb: "list", Group: "coordination.k8s.io", Resource: "leases", Namespace: "gnsh", Name: "reboot-slots",
			FieldSelector: &authzv1.FieldSelectorAttributes{RawSelector: "metadata.name=reboot-slots"}},
		{Verb: "list", Resource: "pods", Namespace: "kube-system", LabelSelector: &authzv1.LabelSelectorAttributes{RawSelector: "component=etcd"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("reviews %+v\nwant %+v", got, want)
	}
	if u, err := rv.WhoAmI(testCtx(t)); u != "system:node:n1" || err != nil {
		t.Errorf("WhoAmI %q %v", u, err)
	}
}

// install/kubernetes/rbac.yaml grants its ServiceAccount every request of
// SlotRequests (a control-plane node's, the Lease not there yet), and
// nothing beyond them: each verb it grants on a resource is one of those
// requests, a ClusterRole grants only what gnsh asks in every namespace
// (or of cluster-scoped objects), a Role only what it asks in that Role's
// namespace. The lists and the manifest must not drift apart. The drain's
// requests (GnshRequests) are the kubelet identity's (issue 22): rbac.yaml
// grants none of them but the Node read the gate needs too.
func TestRBACManifestCoversGnshRequests(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "install", "kubernetes", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	clusterRules := map[string][]rbacv1.PolicyRule{}
	nsRules := map[string]map[string][]rbacv1.PolicyRule{} // namespace → Role → rules
	var bindings []struct {
		kind, ns, role string
		subjects       []rbacv1.Subject
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name, Namespace string
			} `json:"metadata"`
			Rules    []rbacv1.PolicyRule `json:"rules"`
			RoleRef  rbacv1.RoleRef      `json:"roleRef"`
			Subjects []rbacv1.Subject    `json:"subjects"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		switch head.Kind {
		case "ClusterRole":
			clusterRules[head.Metadata.Name] = head.Rules
		case "Role":
			if nsRules[head.Metadata.Namespace] == nil {
				nsRules[head.Metadata.Namespace] = map[string][]rbacv1.PolicyRule{}
			}
			nsRules[head.Metadata.Namespace][head.Metadata.Name] = head.Rules
		case "ClusterRoleBinding", "RoleBinding":
			bindings = append(bindings, struct {
				kind, ns, role string
				subjects       []rbacv1.Subject
			}{head.Kind, head.Metadata.Namespace, head.RoleRef.Name, head.Subjects})
		}
	}
	isSA := func(ss []rbacv1.Subject) bool {
		return slices.ContainsFunc(ss, func(s rbacv1.Subject) bool {
			return s.Kind == "ServiceAccount" && s.Name == "gnsh" && s.Namespace == "kube-system"
		})
	}
	has := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	allows := func(rules []rbacv1.PolicyRule, q APIRequest) bool {
		res := q.Resource
		if q.Subresource != "" {
			res += "/" + q.Subresource
		}
		for _, r := range rules {
			if has(r.Verbs, q.Verb) && has(r.APIGroups, q.Group) && has(r.Resources, res) &&
				(len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, q.Name)) {
				return true
			}
		}
		return false
	}
	reqs := append(SlotRequests("gnsh", "reboot-slots", true, false), TokenRequests()...)
	// Nothing broader than needed.
	for _, b := range bindings {
		if !isSA(b.subjects) {
			continue
		}
		rules := clusterRules[b.role]
		if b.kind == "RoleBinding" {
			rules = nsRules[b.ns][b.role]
		}
		if len(rules) == 0 {
			t.Errorf("%s %s/%s binds a role with no rules", b.kind, b.ns, b.role)
		}
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						used := slices.ContainsFunc(reqs, func(q APIRequest) bool {
							qres := q.Resource
							if q.Subresource != "" {
								qres += "/" + q.Subresource
							}
							return q.Verb == v && q.Group == g && qres == res &&
								(b.kind == "ClusterRoleBinding" && q.Namespace == "" || b.kind == "RoleBinding" && q.Namespace == b.ns)
						})
						if !used {
							t.Errorf("rbac.yaml: %s %s/%s grants %s %s (group %q), which gnsh never requests there", b.kind, b.ns, b.role, v, res, g)
						}
					}
				}
			}
		}
	}
	for _, q := range reqs {
		ok := false
		for _, b := range bindings {
			if !isSA(b.subjects) {
				continue
			}
			switch {
			case b.kind == "ClusterRoleBinding" && allows(clusterRules[b.role], q):
				ok = true
			case b.kind == "RoleBinding" && q.Namespace == b.ns && allows(nsRules[b.ns][b.role], q):
				ok = true
			}
		}
		if !ok {
			t.Errorf("rbac.yaml does not grant %s (%s)", q, q.For)
		}
	}
	for _, q := range GnshRequests("n1", true) {
		if q.Verb == "get" && q.Resource == "nodes" {
			continue // the gate reads Nodes too
		}
		for _, b := range bindings {
			if !isSA(b.subjects) {
				continue
			}
			if b.kind == "ClusterRoleBinding" && allows(clusterRules[b.role], q) ||
				b.kind == "RoleBinding" && q.Namespace == b.ns && allows(nsRules[b.ns][b.role], q) {
				t.Errorf("rbac.yaml grants the drain's %s (%s) by %s %s/%s: that is the kubelet identity's", q, q.For, b.kind, b.ns, b.role)
			}
		}
	}
}
