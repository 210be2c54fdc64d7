// Package gatetoken keeps the reboot-slot gate's token alive on a node: the
// ServiceAccount token of kube-system/gnsh embedded in /etc/gnsh/kubeconfig,
// short-lived and bound to this node's Node object (so that deleting the
// Node revokes it). The node agent renews it with a TokenRequest made with
// the token itself, long before it lapses, and writes the kubeconfig anew
// (atomically, never through a symbolic link). `gnsh token install`
// delivers the first one; gnsh status and gnsh doctor show its state.
package gatetoken

import "github.com/gnsh/gnsh/internal/gatetoken/claims"

// The ServiceAccount whose tokens the gate uses, and its user name.
const (
	Namespace      = claims.Namespace
	ServiceAccount = claims.ServiceAccount
	Username       = claims.Username
)

// Claims are a ServiceAccount token's claims (claims.Claims).
type Claims = claims.Claims

// ErrNotJWT is a token that is not a JSON Web Token.
var ErrNotJWT = claims.ErrNotJWT

// ParseClaims decodes a ServiceAccount token's claims without verifying
// its signature (claims.ParseClaims).
func ParseClaims(token string) (Claims, error) { return claims.ParseClaims(token) }
