package hub

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authentication/user"
)

// countingAuthenticator answers with a fixed result and counts calls: a
// stand-in for the delegated chain, whose own behaviour is k8s.io/apiserver's.
type countingAuthenticator struct {
	calls int
	user  string
	err   error
}

func (c *countingAuthenticator) AuthenticateRequest(*http.Request) (*authenticator.Response, bool, error) {
	c.calls++
	if c.err != nil {
		return nil, false, c.err
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: c.user}}, true, nil
}

func requestWith(cert *x509.Certificate, headers map[string]string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/authorize", nil)
	if cert != nil {
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	}
	for k, v := range headers {
		r.Header.Set(k, v)
	}
	return r
}

func TestCertCacheVerifiesOncePerConnectionCertificate(t *testing.T) {
	now := time.Now()
	valid := &x509.Certificate{NotAfter: now.Add(time.Hour)}
	expiring := &x509.Certificate{NotAfter: now.Add(certCacheTTL / 2)}
	front := &authenticatorfactory.RequestHeaderConfig{
		UsernameHeaders:     headerrequest.StaticStringSlice{"X-Remote-User"},
		GroupHeaders:        headerrequest.StaticStringSlice{"X-Remote-Group"},
		ExtraHeaderPrefixes: headerrequest.StaticStringSlice{"X-Remote-Extra-"},
	}
	for _, tc := range []struct {
		name      string
		delegate  *countingAuthenticator
		cert      *x509.Certificate
		headers   map[string]string
		wantCalls int // after three requests
	}{
		{"certificate alone: verified once", &countingAuthenticator{user: "kube-apiserver"}, valid, nil, 1},
		{"no certificate: every time", &countingAuthenticator{user: "kube-apiserver"}, nil, nil, 3},
		{"bearer token: every time", &countingAuthenticator{user: "kube-apiserver"}, valid, map[string]string{"Authorization": "Bearer x"}, 3},
		{"websocket token: every time", &countingAuthenticator{user: "kube-apiserver"}, valid, map[string]string{"Sec-WebSocket-Protocol": "base64url.bearer.authorization.k8s.io.eA"}, 3},
		{"front-proxy user: every time", &countingAuthenticator{user: "alice"}, valid, map[string]string{"X-Remote-User": "alice"}, 3},
		{"front-proxy extra: every time", &countingAuthenticator{user: "alice"}, valid, map[string]string{"X-Remote-Extra-Scopes": "a"}, 3},
		{"failure: never cached", &countingAuthenticator{err: errors.New("bad chain")}, valid, nil, 3},
		{"anonymous: never cached", &countingAuthenticator{user: user.Anonymous}, valid, nil, 3},
		{"certificate expiring within the TTL: never cached", &countingAuthenticator{user: "kube-apiserver"}, expiring, nil, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newCertCachingAuthenticator(tc.delegate, front)
			a.now = func() time.Time { return now }
			for range 3 {
				resp, ok, err := a.AuthenticateRequest(requestWith(tc.cert, tc.headers))
				if (err != nil) != (tc.delegate.err != nil) || (ok && resp.User.GetName() != tc.delegate.user) {
					t.Fatalf("got %v %v %v", resp, ok, err)
				}
			}
			if tc.delegate.calls != tc.wantCalls {
				t.Errorf("delegate called %d times, want %d", tc.delegate.calls, tc.wantCalls)
			}
		})
	}
}

func TestCertCacheEntryDoesNotOutliveTheCertificate(t *testing.T) {
	now := time.Now()
	cert := &x509.Certificate{NotAfter: now.Add(certCacheTTL + time.Second)}
	d := &countingAuthenticator{user: "kube-apiserver"}
	a := newCertCachingAuthenticator(d, nil)
	a.now = func() time.Time { return now }
	a.AuthenticateRequest(requestWith(cert, nil))
	a.now = func() time.Time { return cert.NotAfter.Add(time.Millisecond) }
	a.AuthenticateRequest(requestWith(cert, nil))
	if d.calls != 2 {
		t.Errorf("delegate called %d times, want 2: an expired certificate must be verified (and refused) again", d.calls)
	}
}
