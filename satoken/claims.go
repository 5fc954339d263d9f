package satoken

import (
	"encoding/base64"
	"encoding/json"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Claims are a JWT's claims, read unverified.
type Claims struct {
	Issuer     string    `json:"iss"`
	Audiences  Audiences `json:"aud"`
	Exp        *int64    `json:"exp"`
	Nbf        *int64    `json:"nbf"`
	Iat        *int64    `json:"iat"`
	Kubernetes *struct {
		Namespace      string `json:"namespace"`
		ServiceAccount *Ref   `json:"serviceaccount"`
		Secret         *Ref   `json:"secret"`
		Pod            *Ref   `json:"pod"`
		Node           *Ref   `json:"node"`
	} `json:"kubernetes.io"`

	// KeyID is the JWS header's kid: which of the issuer's keys signed it.
	KeyID string `json:"-"`
}

// Ref names an object a token is bound to.
type Ref struct {
	Name string    `json:"name"`
	UID  types.UID `json:"uid"`
}

// Audiences is aud, a string or a list of them (RFC 7519 4.1.3).
type Audiences []string

func (a *Audiences) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*a = Audiences{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*a = many
	return nil
}

// Parse reads token's header and claims, unverified; false if it is no
// JWT (an opaque or bootstrap token, or garbage).
func Parse(token string) (Claims, bool) {
	var claims Claims
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
		claims.KeyID = header.KeyID
	}
	return claims, true
}

// Bound reports whether the claims are those of a ServiceAccount token
// a TokenRequest bound to a Pod, Secret or Node: one kube-apiserver
// refuses once that object, or the ServiceAccount, is gone or past its
// deletion, and at its exp.
func (c Claims) Bound() bool {
	k := c.Kubernetes
	return k != nil && k.ServiceAccount != nil && (k.Pod != nil || k.Secret != nil || k.Node != nil)
}
