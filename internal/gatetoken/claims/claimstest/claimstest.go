// Package claimstest makes unsigned ServiceAccount tokens for tests of
// the gate's token (gnsh reads a token's claims and never verifies its
// signature: the API server does).
package claimstest

import (
	"encoding/base64"
	"encoding/json"
	"time"
)

// JWT makes an unsigned token with these claims.
func JWT(claims map[string]any) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(map[string]string{"alg": "RS256"}) + "." + enc(claims) + ".c2ln"
}

// Token is a kube-system/gnsh token issued at iat for life, bound to the
// Node node (UID "uid-"+node), or to none if node is "".
func Token(node string, iat time.Time, life time.Duration) string {
	k := map[string]any{"namespace": "kube-system", "serviceaccount": map[string]string{"name": "gnsh", "uid": "sa-uid"}}
	if node != "" {
		k["node"] = map[string]string{"name": node, "uid": "uid-" + node}
	}
	return JWT(map[string]any{"sub": "system:serviceaccount:kube-system:gnsh", "iat": iat.Unix(), "nbf": iat.Unix(),
		"exp": iat.Add(life).Unix(), "aud": []string{"https://kubernetes.default.svc.cluster.local"}, "kubernetes.io": k})
}
