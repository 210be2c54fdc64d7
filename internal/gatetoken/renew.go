package gatetoken

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
)

// Defaults of a Renewer.
const (
	// DefaultEvery is the longest a token goes unrenewed: a token renewed
	// every hour stays near its full life, so that a node powered off for
	// less than about its life comes back with one that still works.
	DefaultEvery = time.Hour
	// DefaultPoll is how often the file is looked at again (a token
	// installed meanwhile, a renewal due).
	DefaultPoll = time.Minute
	// DefaultRetry is the first wait after a failed renewal; it doubles
	// up to MaxRetry.
	DefaultRetry = time.Minute
	MaxRetry     = 10 * time.Minute
	// DefaultTimeout bounds each request.
	DefaultTimeout = 10 * time.Second
	// MinLife and MaxLife bound the lifetime asked for: the API server's
	// minimum (10 minutes) and the policy's maximum (48 hours).
	MinLife = 10 * time.Minute
	MaxLife = 48 * time.Hour
	// SkewLimit is the difference between a new token's iat (the API
	// server's clock) and this node's clock beyond which the agent says
	// the node's clock is off.
	SkewLimit = 5 * time.Minute
)

// RenewAfter is how long after it was issued a token of life is renewed:
// every, or a third of its life if that is sooner.
func RenewAfter(life, every time.Duration) time.Duration {
	if every <= 0 {
		every = DefaultEvery
	}
	return min(every, life/3)
}

// Renewer keeps the token in the kubeconfig at Path renewed.
type Renewer struct {
	Path string // the gate's kubeconfig, /etc/gnsh/kubeconfig
	// Client makes a client that authenticates with k's own token; nil:
	// one built from k by clientcmd, each request bounded by Timeout.
	Client  func(k *Kubeconfig) (kubernetes.Interface, error)
	Timeout time.Duration // each request; DefaultTimeout if 0
	// Every is the longest a token goes unrenewed (DefaultEvery if 0); a
	// token is renewed once a third of its life is over if that is
	// sooner, less a random jitter of up to a tenth of that.
	Every time.Duration
	Poll  time.Duration // DefaultPoll if 0
	Retry time.Duration // DefaultRetry if 0
	Clock clock.WithTicker
	// Jitter returns a duration in [0, max); nil: random.
	Jitter func(max time.Duration) time.Duration
	// Say receives the lines for the journal, each once per change of
	// state ("gnsh: …").
	Say func(string)
	// Record receives the state after every look at the file.
	Record func(State)

	started  bool
	failSaid bool          // a failure was said, and no success since
	said     string        // key of the state last said
	jitterOf time.Time     // the iat the jitter was drawn for
	jitter   time.Duration // drawn for jitterOf
	// The renewal is planned on this node's clock from when the token
	// was received (received, for the token of iat seenIat), never by
	// comparing the API server's iat with this node's clock: a node
	// whose clock is ahead would otherwise find every new token due.
	seenIat   time.Time
	received  time.Time
	lastRenew time.Time // the last renewal, on this node's clock
	skew      string    // the clock skew last seen ("" none), State.ClockSkew
	skewSaid  bool      // skew was said in the journal
	nextTry   time.Time // no renewal before (after a failure)
	backoff   time.Duration
	state     State
}

// State is the token's state as the agent saw it last (gnsh status,
// gnsh doctor read it from the agent's state file).
type State struct {
	Path    string    `json:"path"`
	Node    string    `json:"node,omitempty"`
	Expiry  time.Time `json:"expiry,omitzero"`
	Renewed time.Time `json:"renewed,omitzero"` // the last renewal by the agent
	// Error is why the token is not being renewed: the last renewal's
	// failure, or what is wrong with the token or its file. "" when all
	// is well (or there is no token to renew: Idle says why).
	Error string    `json:"error,omitempty"`
	Since time.Time `json:"since,omitzero"` // the first failure in a row
	Idle  string    `json:"idle,omitempty"` // why there is nothing to renew
	Next  time.Time `json:"next,omitzero"`  // the next renewal planned
	At    time.Time `json:"at"`             // when this state was seen
	// ClockSkew says this node's clock is off the API server's by more
	// than SkewLimit, as seen from a token's iat: "this node's clock is
	// 2h ahead of the API server's". "" when not seen.
	ClockSkew string `json:"clockSkew,omitempty"`
}

func (r *Renewer) clock() clock.WithTicker {
	if r.Clock == nil {
		return clock.RealClock{}
	}
	return r.Clock
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Run renews the token until ctx ends: at once (the agent starting), then
// as it falls due.
func (r *Renewer) Run(ctx context.Context) {
	for {
		wait := r.Once(ctx)
		t := r.clock().NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// Once looks at the file, renews the token if that is due, and returns
// how long to wait before the next look.
func (r *Renewer) Once(ctx context.Context) time.Duration {
	now := r.clock().Now()
	poll := orDefault(r.Poll, DefaultPoll)
	st := State{Path: r.Path, Renewed: r.state.Renewed, At: now}
	first := !r.started
	r.started = true
	k, err := Load(r.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		st.Idle = "no " + r.Path
		r.settle(st, "absent", "")
		return poll
	case err != nil:
		st.Error = err.Error()
		r.settle(st, "file:"+err.Error(), fmt.Sprintf("gnsh: the gate's token in %s cannot be renewed: %v", r.Path, err))
		return poll
	}
	token := k.Token()
	if token == "" {
		st.Idle = r.Path + " has no embedded token (another kind of credential)"
		r.settle(st, "notoken", "")
		return poll
	}
	c, err := ParseClaims(token)
	if err != nil {
		st.Error = err.Error()
		r.settle(st, "claims", fmt.Sprintf("gnsh: the gate's token in %s cannot be renewed: %v; "+
			"install a token of kube-system/gnsh bound to this node: re-run the playbook or `gnsh token install`", r.Path, err))
		return poll
	}
	st.Node, st.Expiry = c.NodeName, c.Expiry
	if why := renewable(c); why != "" {
		st.Error = why
		r.settle(st, "unrenewable:"+why, fmt.Sprintf("gnsh: the gate's token in %s %s, so the agent cannot renew it: "+
			"re-run the playbook or `gnsh token install` with a token from `kubectl -n kube-system create token gnsh "+
			"--bound-object-kind Node --bound-object-name NODE --duration 24h`", r.Path, why))
		return poll
	}
	life := c.Life()
	after := RenewAfter(life, r.Every)
	if !c.IssuedAt.Equal(r.jitterOf) {
		r.jitterOf, r.jitter = c.IssuedAt, r.drawJitter(after/10)
	}
	if !c.IssuedAt.Equal(r.seenIat) {
		// A token this agent did not renew (installed, or there when it
		// started): received now, or at its iat when that is in this
		// node's past (an older token: it is due sooner; a node clock
		// ahead makes it due at once, and the renewed token is then
		// planned from its receipt). An iat in this node's future is
		// the node's clock behind the API server's.
		r.seenIat, r.received = c.IssuedAt, now
		if c.IssuedAt.Before(now) {
			r.received = c.IssuedAt
		} else {
			r.noteSkew(now.Sub(c.IssuedAt))
		}
	}
	due := r.received.Add(after - r.jitter)
	if !r.lastRenew.IsZero() && due.Before(r.lastRenew.Add(poll)) {
		due = r.lastRenew.Add(poll) // never more often than once a Poll
	}
	if !first && now.Before(due) {
		st.Next, st.Error, st.Since = due, r.state.Error, r.state.Since
		if st.Error == "" {
			r.settle(st, "ok", "")
		} else {
			r.record(st)
		}
		return min(poll, due.Sub(now))
	}
	if now.Before(r.nextTry) {
		st.Error, st.Since, st.Next = r.state.Error, r.state.Since, r.nextTry
		r.settle(st, r.said, "") // the same failure, still
		return min(poll, r.nextTry.Sub(now))
	}
	nc, err := r.renew(ctx, k, c)
	if err != nil {
		r.backoff = min(MaxRetry, max(orDefault(r.Retry, DefaultRetry), 2*r.backoff))
		if r.state.Error == "" || r.state.Since.IsZero() {
			st.Since = now
		} else {
			st.Since = r.state.Since
		}
		r.nextTry = now.Add(r.backoff)
		st.Error, st.Next = err.Error(), r.nextTry
		expired := !now.Before(c.Expiry)
		kind := failKind(err)
		// An API server that does not answer while the token has more
		// than half its life left (a control-plane node's own API
		// server still starting after boot) is not worth a line yet:
		// it is said once half the life is gone.
		quiet := kind == "other" && c.Expiry.Sub(now) > c.Life()/2
		line := failLine(r.Path, c, now, err)
		if quiet {
			line = ""
		}
		r.settle(st, fmt.Sprintf("fail:%s:%v:%v", kind, expired, quiet), line)
		if line != "" {
			r.failSaid = true
		}
		return min(poll, r.backoff)
	}
	r.backoff, r.nextTry = 0, time.Time{}
	r.seenIat, r.received, r.lastRenew = nc.IssuedAt, now, now
	r.noteSkew(now.Sub(nc.IssuedAt)) // the API server's clock at about now
	st.Renewed, st.Expiry, st.Node, st.Error, st.Since = now, nc.Expiry, nc.NodeName, "", time.Time{}
	st.Next = now.Add(max(poll, RenewAfter(nc.Life(), r.Every)))
	line := ""
	if r.failSaid {
		line = fmt.Sprintf("gnsh: the gate's token in %s is renewed again: node %s, valid until %s", r.Path, nc.NodeName, stamp(nc.Expiry))
	}
	r.failSaid = false
	r.settle(st, "ok", line)
	return min(poll, max(time.Second, st.Next.Sub(now)))
}

// renewable says why a token is not one the agent can renew, "" if it is.
func renewable(c Claims) string {
	switch {
	case !c.IsGnsh():
		return fmt.Sprintf("belongs to %s, not to the ServiceAccount %s/%s", c.Subject, Namespace, ServiceAccount)
	case c.Expiry.IsZero():
		return "never expires (a legacy Secret's token)"
	case c.OtherBinding != "":
		return "is bound to a " + c.OtherBinding + ", not to a Node"
	case c.NodeName == "":
		return "is not bound to a Node"
	}
	return ""
}

func (r *Renewer) drawJitter(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	if r.Jitter != nil {
		return r.Jitter(max)
	}
	return rand.N(max)
}

// settle records st and says line if key differs from the state said
// last (nothing is said for an empty line, but the key is kept).
func (r *Renewer) settle(st State, key, line string) {
	if key != r.said {
		r.said = key
		if line != "" && r.Say != nil {
			r.Say(line)
		}
	}
	r.record(st)
}

// noteSkew notes d, this node's clock less the API server's as a token's
// iat shows it: beyond SkewLimit either way it is kept for the state and
// said once in the journal (again only after it was gone).
func (r *Renewer) noteSkew(d time.Duration) {
	if d.Abs() <= SkewLimit {
		r.skew, r.skewSaid = "", false
		return
	}
	way := "ahead of"
	if d < 0 {
		way = "behind"
	}
	r.skew = fmt.Sprintf("this node's clock is %s %s the API server's", Human(d.Abs()), way)
	if !r.skewSaid && r.Say != nil {
		r.Say(fmt.Sprintf("gnsh: %s (the gate's token in %s was issued at %s by the API server's clock): "+
			"sync this node's clock (timedatectl set-ntp true, chrony or systemd-timesyncd); "+
			"the agent plans the token's renewals by this node's clock meanwhile", r.skew, r.Path, rfc3339(r.seenIat)))
	}
	r.skewSaid = true
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func (r *Renewer) record(st State) {
	st.ClockSkew = r.skew
	r.state = st
	if r.Record != nil {
		r.Record(st)
	}
}

// renew asks for a new token like c, with k's token, and writes it into
// the kubeconfig, unless the file's token changed meanwhile.
func (r *Renewer) renew(ctx context.Context, k *Kubeconfig, c Claims) (Claims, error) {
	mk := r.Client
	if mk == nil {
		mk = func(k *Kubeconfig) (kubernetes.Interface, error) {
			return clientFor(k, orDefault(r.Timeout, DefaultTimeout))
		}
	}
	cl, err := mk(k)
	if err != nil {
		return Claims{}, err
	}
	token, err := Request(ctx, cl, c, orDefault(r.Timeout, DefaultTimeout))
	if err != nil {
		return Claims{}, err
	}
	nc, err := ParseClaims(token)
	if err != nil {
		return Claims{}, fmt.Errorf("the API server's token: %w", err)
	}
	if !nc.IsGnsh() || nc.NodeName != c.NodeName {
		return Claims{}, fmt.Errorf("the API server issued a token for %s bound to Node %q, not %q", nc.Subject, nc.NodeName, c.NodeName)
	}
	cur, err := Load(r.Path)
	if err != nil {
		return Claims{}, err
	}
	if cur.Token() != k.Token() {
		return Claims{}, fmt.Errorf("%s changed while the token was renewed; trying again", r.Path)
	}
	if err := cur.SetToken(token); err != nil {
		return Claims{}, err
	}
	if err := cur.Save(); err != nil {
		return Claims{}, fmt.Errorf("write %s: %w", r.Path, err)
	}
	return nc, nil
}

// Request asks the API server, through c, for a new token of
// kube-system/gnsh bound to the Node of c (name and UID), of the same
// lifetime (within MinLife and MaxLife: a longer-lived token is renewed
// for MaxLife, which the gnsh-token policy allows), bounded by timeout.
func Request(ctx context.Context, c kubernetes.Interface, cl Claims, timeout time.Duration) (string, error) {
	secs := int64(min(MaxLife, max(MinLife, cl.Life())) / time.Second)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &secs,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: cl.NodeName, UID: types.UID(cl.NodeUID)},
	}}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := c.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, ServiceAccount, tr, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	if out.Status.Token == "" {
		return "", errors.New("the API server answered the TokenRequest without a token")
	}
	return out.Status.Token, nil
}

// clientFor is a client with k's own credentials, each request bounded.
func clientFor(k *Kubeconfig, timeout time.Duration) (kubernetes.Interface, error) {
	rc, err := clientcmd.NewDefaultClientConfig(*k.Config, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", k.Path, err)
	}
	rc.Timeout = timeout
	rc.UserAgent = "gnsh"
	return kubernetes.NewForConfig(rc)
}

// failKind classifies a renewal's failure, so that the same failure
// again is not said again.
func failKind(err error) string {
	switch {
	case errors.Is(err, syscall.EROFS):
		return "erofs"
	case apierrors.IsUnauthorized(err):
		return "401"
	case apierrors.IsForbidden(err):
		return "403"
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return "400"
	}
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return fmt.Sprint(se.Status().Code)
	}
	return "other"
}

// failLine is the journal's line for a renewal that failed.
func failLine(path string, c Claims, now time.Time, err error) string {
	when := "expires in " + Human(c.Expiry.Sub(now))
	if !now.Before(c.Expiry) {
		when = "expired " + Human(now.Sub(c.Expiry)) + " ago"
	}
	if errors.Is(err, syscall.EROFS) {
		// The unit's sandbox (ProtectSystem=strict): only the directories
		// in its ReadWritePaths= (/run/gnsh, /etc/gnsh) can be written.
		dir := filepath.Dir(path)
		return fmt.Sprintf("gnsh: the gate's token in %s (node %s) %s and cannot be renewed: %s is read-only for gnsh.service; "+
			"let it write there with a drop-in (`systemctl edit gnsh`: [Service] ReadWritePaths=%s) and restart it", path, c.NodeName, when, dir, dir)
	}
	return fmt.Sprintf("gnsh: the gate's token in %s (node %s) %s and cannot be renewed (%s): "+
		"re-run the playbook or `gnsh token install`", path, c.NodeName, when, Reason(err))
}

// Reason words a renewal's failure for an admin.
func Reason(err error) string {
	switch {
	case apierrors.IsUnauthorized(err):
		return "the API server refuses the token: 401 Unauthorized; it expired, or its Node was deleted"
	case apierrors.IsForbidden(err):
		return "403 Forbidden: " + statusMessage(err) +
			"; is gnsh's rbac.yaml applied (Role gnsh:token, the gnsh-token policy)?"
	}
	return err.Error()
}

func statusMessage(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se.Status().Message
	}
	return err.Error()
}

// IsUnauthorized reports whether err is the API server refusing the
// credentials (HTTP 401).
func IsUnauthorized(err error) bool {
	var se apierrors.APIStatus
	return errors.As(err, &se) && se.Status().Code == http.StatusUnauthorized
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

// Human is a duration in whole hours and minutes, or seconds under a
// minute: "26h", "3h20m", "25m", "40s".
func Human(d time.Duration) string {
	if d < time.Minute {
		return d.Round(time.Second).String()
	}
	if d >= 10*time.Hour {
		return fmt.Sprintf("%dh", d.Round(time.Hour)/time.Hour)
	}
	d = d.Round(time.Minute)
	h, m := d/time.Hour, (d%time.Hour)/time.Minute
	switch {
	case h == 0:
		return fmt.Sprintf("%dm", m)
	case m == 0:
		return fmt.Sprintf("%dh", h)
	}
	return fmt.Sprintf("%dh%dm", h, m)
}
