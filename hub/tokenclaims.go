package hub

import (
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeproxy/nodeproxy/satoken"
)

// tokenClaims is what the hub reads of a JWT bearer token, unverified
// (package satoken): only of a token kube-apiserver's TokenReview
// accepted when its connection opened, so they are the ones its
// authenticator verified.
type tokenClaims = satoken.Claims

type boundRef = satoken.Ref

// claimsOf reads cred's bearer token's header and claims, unverified;
// false if it has no JWT bearer token.
func claimsOf(cred *credential) (tokenClaims, bool) {
	auth := cred.header.Get("Authorization")
	scheme, token, ok := strings.Cut(strings.TrimSpace(auth), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return tokenClaims{}, false
	}
	return satoken.Parse(token)
}

// boundUIDs are the objects cred's token names: its ServiceAccount and
// the object it is bound to.
func boundUIDs(cred *credential) []types.UID {
	claims, ok := claimsOf(cred)
	if !ok || claims.Kubernetes == nil {
		return nil
	}
	var uids []types.UID
	k := claims.Kubernetes
	for _, ref := range []*boundRef{k.Secret, k.Pod, k.Node, k.ServiceAccount} {
		if ref != nil && ref.UID != "" {
			uids = append(uids, ref.UID)
		}
	}
	return uids
}

// tokenExpiry is cred's bearer token's exp claim.
func tokenExpiry(cred *credential) (time.Time, bool) {
	claims, ok := claimsOf(cred)
	if !ok || claims.Exp == nil {
		return time.Time{}, false
	}
	return time.Unix(*claims.Exp, 0), true
}

// classOf is the token's class: what of kube-apiserver's authenticator
// configuration judges it (its issuer, the key that signed it, the
// audiences it was issued for), which the local check cannot see.
func classOf(c tokenClaims) tokenClass {
	auds := slices.Clone(c.Audiences)
	slices.Sort(auds)
	return tokenClass{issuer: c.Issuer, keyID: c.KeyID, audiences: strings.Join(auds, ",")}
}

// tokenClass groups the tokens whose acceptance hangs on the same part of
// kube-apiserver's configuration: one canary review a re-check interval
// answers for all of them (canary.go).
type tokenClass struct {
	issuer, keyID, audiences string
}
