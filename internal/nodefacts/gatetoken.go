package nodefacts

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/gatetoken"
	"github.com/gnsh/gnsh/internal/kube"
)

// GateTokenStatePath is where the node agent keeps its gate-token
// renewer's last state (gatetoken.State, JSON) for gnsh status and doctor.
const GateTokenStatePath = drainer.DefaultLockDir + "/gate-token.json"

// TokenRequests are the requests the node agent sends to renew the gate's
// token (internal/gatetoken) with the token itself.
func TokenRequests() []APIRequest {
	return []APIRequest{{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: gatetoken.Namespace,
		Name: gatetoken.ServiceAccount, For: "renew the gate's token (the node agent)"}}
}

// GateTokenFacts is the gate's token in /etc/gnsh/kubeconfig: what its
// claims say, and what the node agent last made of renewing it.
type GateTokenFacts struct {
	Path string `json:"path"`
	// Error: the file or its token cannot be read (or is no
	// ServiceAccount token); the rest is then empty.
	Error string `json:"error,omitempty"`
	// Unreadable: Error is this user's lack of permission (not root).
	Unreadable bool      `json:"unreadable,omitempty"`
	Subject    string    `json:"subject,omitempty"`
	Node       string    `json:"node,omitempty"` // the Node it is bound to, "" if none
	Binding    string    `json:"binding,omitempty"`
	IssuedAt   time.Time `json:"issuedAt,omitzero"`
	Expiry     time.Time `json:"expiry,omitzero"` // zero: never
	// Renewed is the agent's last renewal, RenewError why its last try
	// failed (since RenewErrorSince), from the agent's state file; Agent
	// says whether that file was there.
	Agent           bool      `json:"agentState"`
	Renewed         time.Time `json:"renewed,omitzero"`
	RenewError      string    `json:"renewError,omitempty"`
	RenewErrorSince time.Time `json:"renewErrorSince,omitzero"`
	// ClockSkew is the agent's word that this node's clock is off the
	// API server's (gatetoken.State.ClockSkew), "" if not.
	ClockSkew string    `json:"clockSkew,omitempty"`
	At        time.Time `json:"at"` // when this was read
}

// readGateToken reads the gate's token; nil when there is no
// /etc/gnsh/kubeconfig or it holds no embedded token (another kind of
// credential: nothing to renew).
func readGateToken(s *Sources, now time.Time) *GateTokenFacts {
	name := kube.GnshKubeconfig
	if cfg, _, err := s.config(); err == nil && cfg.Slots.Kubeconfig != "" {
		name = cfg.Slots.Kubeconfig // the gate's kubeconfig, the one the agent renews
	}
	path := s.path(name)
	f := &GateTokenFacts{Path: name, At: now}
	k, err := gatetoken.Load(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case errors.Is(err, fs.ErrPermission):
		f.Error, f.Unreadable = "this user may not read it (run as root)", true
		return f
	case err != nil:
		f.Error = err.Error()
		return f
	case k.Token() == "":
		return nil
	}
	c, err := gatetoken.ParseClaims(k.Token())
	if err != nil {
		f.Error = err.Error()
		return f
	}
	f.Subject, f.Node, f.Binding, f.IssuedAt, f.Expiry = c.Subject, c.NodeName, c.OtherBinding, c.IssuedAt, c.Expiry
	if data, err := os.ReadFile(s.path(GateTokenStatePath)); err == nil {
		var st gatetoken.State
		if json.Unmarshal(data, &st) == nil {
			f.Agent, f.Renewed, f.RenewError, f.RenewErrorSince = true, st.Renewed, st.Error, st.Since
			f.ClockSkew = st.ClockSkew
		}
	}
	return f
}

// Line is gnsh status's row for the token: "node n1, valid until … (in
// 23h), renewed by the agent at …".
func (f *GateTokenFacts) Line() string {
	if f.Error != "" {
		return "error: " + f.Error
	}
	var s string
	switch {
	case f.Binding != "":
		s = "bound to a " + f.Binding + " (not a Node)"
	case f.Node == "":
		s = "not bound to a Node"
	default:
		s = "node " + f.Node
	}
	if f.Subject != gatetoken.Username {
		s += ", of " + f.Subject
	}
	switch {
	case f.Expiry.IsZero():
		s += ", never expires"
	case !f.At.Before(f.Expiry):
		s += fmt.Sprintf(", expired %s (%s ago)", stampUTC(f.Expiry), gatetoken.Human(f.At.Sub(f.Expiry)))
	default:
		s += fmt.Sprintf(", valid until %s (in %s)", stampUTC(f.Expiry), gatetoken.Human(f.Expiry.Sub(f.At)))
	}
	switch {
	case f.RenewError != "":
		s += fmt.Sprintf("; renewal failing since %s: %s", stampUTC(f.RenewErrorSince), f.RenewError)
	case !f.Renewed.IsZero():
		s += "; renewed by the agent at " + stampUTC(f.Renewed)
	case !f.Agent:
		s += "; issued " + stampUTC(f.IssuedAt) + ", not renewed by the agent yet"
	default:
		s += "; issued " + stampUTC(f.IssuedAt)
	}
	if f.ClockSkew != "" {
		s += "; " + f.ClockSkew + ": " + clockSkewFix
	}
	return s
}

// clockSkewFix is how to end a clock skew the agent saw.
const clockSkewFix = "sync this node's clock (timedatectl set-ntp true, chrony or systemd-timesyncd)"

func stampUTC(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

// GateTokenWarnBefore: doctor warns when the token has less than this
// left (the agent renews it hourly: it is failing to).
const GateTokenWarnBefore = 6 * time.Hour

// gateTokenFix is how an admin puts a new token in place.
const gateTokenFix = "re-run the playbook, or: kubectl -n kube-system create token gnsh --bound-object-kind Node " +
	"--bound-object-name NODE --duration 24h | ssh NODE gnsh token install"

// CheckGateToken judges the gate's token: none is fine (no dedicated
// identity); expired, or bound to another node's name, fails; not bound
// to a Node, never expiring, under GateTokenWarnBefore left or failing to
// renew warns.
func CheckGateToken(r *Report) Check {
	c := Check{Name: "gate token"}
	f := r.GateToken
	if f == nil {
		c.Verdict, c.Message = OK, "no token in the gate's kubeconfig ("+kube.GnshKubeconfig+" or slots.kubeconfig): no identity of its own for the gate"
		return c
	}
	c.Message = f.Path + ": " + f.Line()
	c.Verdict = OK
	switch {
	case f.Unreadable:
		c.Verdict, c.Message, c.Fix = Warn, "not checked: "+f.Path+": "+f.Error, "run gnsh doctor as root"
	case f.Error != "":
		c.Verdict, c.Fix = Fail, gateTokenFix
	case f.Subject != gatetoken.Username:
		c.Verdict, c.Fix = Warn, "it is not kube-system/gnsh's: "+gateTokenFix
	case !f.Expiry.IsZero() && !f.At.Before(f.Expiry):
		c.Verdict, c.Fix = Fail, "the gate is unavailable until a new token is installed: "+gateTokenFix
	case f.Node != "" && r.Node.Name != "" && f.Node != r.Node.Name:
		c.Verdict, c.Fix = Fail, fmt.Sprintf("the token is bound to Node %s, this node is %s: a token copied from another node? ", f.Node, r.Node.Name)+gateTokenFix
	case f.Expiry.IsZero() || f.Node == "" || f.Binding != "":
		c.Verdict, c.Fix = Warn, "a long-lived or unbound token works until it is revoked and the agent cannot renew it; install a short-lived one bound to this Node: "+gateTokenFix
	case f.Expiry.Sub(f.At) < GateTokenWarnBefore:
		c.Verdict, c.Fix = Warn, "the node agent renews it hourly (is gnsh.service running? its journal says why not): "+gateTokenFix
	case f.RenewError != "":
		c.Verdict, c.Fix = Warn, "the node agent's renewal fails; "+gateTokenFix
	case f.ClockSkew != "":
		c.Verdict, c.Fix = Warn, clockSkewFix
	}
	return c
}
