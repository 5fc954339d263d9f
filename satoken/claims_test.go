package satoken

import (
	"encoding/base64"
	"slices"
	"testing"
)

func jwt(header, payload string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(header)) + "." + enc([]byte(payload)) + ".c2ln"
}

func TestParseReadsWhatATokenSaysOfItself(t *testing.T) {
	const sa = `"serviceaccount":{"name":"kube-proxy","uid":"sa-1"}`
	for _, tc := range []struct {
		name      string
		token     string
		ok, bound bool
		kid       string
		auds      []string
	}{
		{"a kube-proxy's projected token, bound to its pod", jwt(`{"alg":"RS256","kid":"k1"}`, `{"iss":"https://kubernetes.default.svc","aud":["https://kubernetes.default.svc"],"exp":1,"kubernetes.io":{"namespace":"kube-system",`+sa+`,"pod":{"name":"kube-proxy-x","uid":"p-1"}}}`), true, true, "k1", []string{"https://kubernetes.default.svc"}},
		{"bound to a Secret", jwt(`{}`, `{"kubernetes.io":{`+sa+`,"secret":{"name":"s","uid":"s-1"}}}`), true, true, "", nil},
		{"bound to a Node", jwt(`{}`, `{"kubernetes.io":{`+sa+`,"node":{"name":"n","uid":"n-1"}}}`), true, true, "", nil},
		{"a TokenRequest bound to nothing", jwt(`{}`, `{"kubernetes.io":{`+sa+`}}`), true, false, "", nil},
		{"a legacy Secret-based token (flat claims)", jwt(`{}`, `{"kubernetes.io/serviceaccount/secret.name":"t"}`), true, false, "", nil},
		{"aud as one string", jwt(`{}`, `{"aud":"api"}`), true, false, "", []string{"api"}},
		{"an OIDC token naming a pod but no ServiceAccount", jwt(`{}`, `{"kubernetes.io":{"pod":{"name":"p","uid":"p-1"}}}`), true, false, "", nil},
		{"an opaque token", "abcdef.0123456789abcdef", false, false, "", nil},
		{"a bootstrap-like token with three parts not base64", "a.b!.c", false, false, "", nil},
		{"claims that are not JSON", "e30." + base64.RawURLEncoding.EncodeToString([]byte("nope")) + ".c2ln", false, false, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := Parse(tc.token)
			if ok != tc.ok || c.Bound() != tc.bound {
				t.Fatalf("Parse: ok %v, bound %v; want %v, %v", ok, c.Bound(), tc.ok, tc.bound)
			}
			if c.KeyID != tc.kid || !slices.Equal(c.Audiences, tc.auds) {
				t.Errorf("kid %q, aud %q; want %q, %q", c.KeyID, c.Audiences, tc.kid, tc.auds)
			}
		})
	}
}
