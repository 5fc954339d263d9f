package hub

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// tokenClaims is what the hub reads of a JWT bearer token, unverified:
// the standard claims kube-apiserver's service account authenticator
// checks (iss, aud, exp, nbf, iat), the header's key ID, and the
// kubernetes.io claims a TokenRequest writes (the ServiceAccount, and the
// Secret, Pod or Node the token is bound to, each by name and UID).
//
// Unverified is enough: the hub reads the claims only of a token that
// kube-apiserver's TokenReview accepted when its connection opened, so
// they are the ones its authenticator verified.
type tokenClaims struct {
	Issuer     string        `json:"iss"`
	Audiences  audienceClaim `json:"aud"`
	Exp        *int64        `json:"exp"`
	Nbf        *int64        `json:"nbf"`
	Iat        *int64        `json:"iat"`
	Kubernetes *struct {
		Namespace      string    `json:"namespace"`
		ServiceAccount *boundRef `json:"serviceaccount"`
		Secret         *boundRef `json:"secret"`
		Pod            *boundRef `json:"pod"`
		Node           *boundRef `json:"node"`
	} `json:"kubernetes.io"`

	// keyID is the JWS header's kid: which of the issuer's keys signed it.
	keyID string
}

type boundRef struct {
	Name string    `json:"name"`
	UID  types.UID `json:"uid"`
}

// audienceClaim is aud, a string or a list of them (RFC 7519 4.1.3).
type audienceClaim []string

func (a *audienceClaim) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*a = audienceClaim{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*a = many
	return nil
}

// claimsOf reads cred's bearer token's header and claims, unverified;
// false if it has no JWT bearer token.
func claimsOf(cred *credential) (tokenClaims, bool) {
	var claims tokenClaims
	auth := cred.header.Get("Authorization")
	scheme, token, ok := strings.Cut(strings.TrimSpace(auth), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return claims, false
	}
	parts := strings.Split(strings.TrimSpace(token), ".")
	if len(parts) != 3 {
		return claims, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return claims, false
	}
	if json.Unmarshal(payload, &claims) != nil {
		return claims, false
	}
	var header struct {
		KeyID string `json:"kid"`
	}
	if raw, err := base64.RawURLEncoding.DecodeString(parts[0]); err == nil && json.Unmarshal(raw, &header) == nil {
		claims.keyID = header.KeyID
	}
	return claims, true
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

// class is the token's class: what of kube-apiserver's authenticator
// configuration judges it (its issuer, the key that signed it, the
// audiences it was issued for), which the local check cannot see.
func (c tokenClaims) class() tokenClass {
	auds := slices.Clone(c.Audiences)
	slices.Sort(auds)
	return tokenClass{issuer: c.Issuer, keyID: c.keyID, audiences: strings.Join(auds, ",")}
}

// tokenClass groups the tokens whose acceptance hangs on the same part of
// kube-apiserver's configuration: one canary review a re-check interval
// answers for all of them (canary.go).
type tokenClass struct {
	issuer, keyID, audiences string
}
