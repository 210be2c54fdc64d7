// Package claims reads the claims of a Kubernetes ServiceAccount token
// (a JWT) without verifying it, for internal/gatetoken. It depends on the
// standard library alone, so that its fuzz target builds quickly.
package claims

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The ServiceAccount whose tokens the gate uses.
const (
	Namespace      = "kube-system"
	ServiceAccount = "gnsh"
	// Username is how the API server names a token of it.
	Username = "system:serviceaccount:" + Namespace + ":" + ServiceAccount
)

// Claims are what gnsh reads of a ServiceAccount token: its payload,
// decoded without verifying the signature (the API server verifies it at
// every request; gnsh only plans when to renew and shows what it holds).
type Claims struct {
	Subject        string    // "system:serviceaccount:NS:NAME"
	Namespace      string    // kubernetes.io.namespace
	ServiceAccount string    // kubernetes.io.serviceaccount.name
	IssuedAt       time.Time // iat
	Expiry         time.Time // exp; zero for a token that never expires (a legacy Secret's)
	NodeName       string    // kubernetes.io.node.name: bound to that Node
	NodeUID        string    // kubernetes.io.node.uid
	// OtherBinding names a binding other than a Node's ("pod", "secret",
	// a webhook configuration), "" if none.
	OtherBinding string
}

// NodeBound reports whether the token is bound to a Node object alone.
func (c Claims) NodeBound() bool { return c.NodeName != "" && c.OtherBinding == "" }

// Life is the lifetime the token was issued with (exp − iat), 0 if it has
// no expiry.
func (c Claims) Life() time.Duration {
	if c.Expiry.IsZero() || c.IssuedAt.IsZero() || !c.Expiry.After(c.IssuedAt) {
		return 0
	}
	return c.Expiry.Sub(c.IssuedAt)
}

// IsGnsh reports whether the token is one of kube-system/gnsh.
func (c Claims) IsGnsh() bool {
	return c.Namespace == Namespace && c.ServiceAccount == ServiceAccount
}

// ErrNotJWT is a token that is not a JSON Web Token (three base64url parts
// with a JSON payload): not a ServiceAccount token.
var ErrNotJWT = errors.New("not a ServiceAccount token (a JSON Web Token)")

type ref struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

type payload struct {
	Sub string          `json:"sub"`
	Iat json.Number     `json:"iat"`
	Exp json.Number     `json:"exp"`
	K8s *kubernetesPart `json:"kubernetes.io"`
}

type kubernetesPart struct {
	Namespace      string          `json:"namespace"`
	ServiceAccount *ref            `json:"serviceaccount"`
	Node           *ref            `json:"node"`
	Pod            json.RawMessage `json:"pod"`
	Secret         json.RawMessage `json:"secret"`
	VWC            json.RawMessage `json:"validatingwebhookconfiguration"`
	MWC            json.RawMessage `json:"mutatingwebhookconfiguration"`
}

// maxTokenLen bounds what ParseClaims decodes: a ServiceAccount token is
// about a kilobyte.
const maxTokenLen = 64 << 10

// ParseClaims decodes a ServiceAccount token's claims. It does not verify
// the signature. A token that is not a JWT, or whose payload lacks the
// kubernetes.io claims, is an error.
func ParseClaims(token string) (Claims, error) {
	token = strings.TrimSpace(token)
	if len(token) > maxTokenLen {
		return Claims{}, fmt.Errorf("%w: %d bytes long", ErrNotJWT, len(token))
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return Claims{}, ErrNotJWT
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return Claims{}, fmt.Errorf("%w: payload: %v", ErrNotJWT, err)
	}
	var p payload
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		return Claims{}, fmt.Errorf("%w: payload: %v", ErrNotJWT, err)
	}
	if p.K8s == nil || p.K8s.ServiceAccount == nil {
		return Claims{}, errors.New("not a ServiceAccount token (no kubernetes.io claims: a legacy Secret's token, or another issuer's)")
	}
	c := Claims{Subject: p.Sub, Namespace: p.K8s.Namespace, ServiceAccount: p.K8s.ServiceAccount.Name}
	if c.IssuedAt, err = unixTime(p.Iat); err != nil {
		return Claims{}, fmt.Errorf("iat: %w", err)
	}
	if c.Expiry, err = unixTime(p.Exp); err != nil {
		return Claims{}, fmt.Errorf("exp: %w", err)
	}
	if n := p.K8s.Node; n != nil {
		c.NodeName, c.NodeUID = n.Name, n.UID
	}
	for _, o := range []struct {
		name string
		v    json.RawMessage
	}{{"pod", p.K8s.Pod}, {"secret", p.K8s.Secret}, {"validatingwebhookconfiguration", p.K8s.VWC}, {"mutatingwebhookconfiguration", p.K8s.MWC}} {
		if len(o.v) > 0 && string(o.v) != "null" {
			c.OtherBinding = o.name
			break
		}
	}
	return c, nil
}

// unixTime reads a NumericDate (seconds since the epoch, maybe with a
// fraction); empty is the zero time.
func unixTime(n json.Number) (time.Time, error) {
	if n == "" {
		return time.Time{}, nil
	}
	if i, err := n.Int64(); err == nil {
		if i < 0 || i > 1<<40 {
			return time.Time{}, fmt.Errorf("out of range: %s", n)
		}
		return time.Unix(i, 0), nil
	}
	f, err := n.Float64()
	if err != nil || f < 0 || f > 1<<40 {
		return time.Time{}, fmt.Errorf("not a time: %q", n.String())
	}
	return time.Unix(int64(f), 0), nil
}
