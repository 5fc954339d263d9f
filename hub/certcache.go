package hub

import (
	"crypto/x509"
	"net/http"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
)

// Tuning of the client-certificate cache. k8s.io/apiserver verifies a
// client certificate's chain on every request, not once per connection:
// on two cores that was a quarter of the CPU of the authorization webhook
// at 9k reviews/s (BenchmarkWebhookHTTPS). The TTL is the delegated token
// cache's (--authentication-token-webhook-cache-ttl): how long a CA
// rotation may take to reach a connection that is already open. The size
// bounds memory at a few hundred bytes per open client connection.
const (
	certCacheTTL  = 10 * time.Second
	certCacheSize = 4096
)

// certCachingAuthenticator remembers who a client certificate
// authenticated as, keyed by the certificate object of the TLS connection:
// a request on a connection whose certificate was verified less than
// certCacheTTL ago skips the chain verification. Only requests whose
// identity depends on the certificate alone are answered from the cache:
// one carrying a bearer token, a websocket protocol token or front-proxy
// identity headers goes to the delegate every time. Failures and
// anonymous results are never cached, and no entry outlives its
// certificate's NotAfter.
type certCachingAuthenticator struct {
	delegate authenticator.Request
	headers  *authenticatorfactory.RequestHeaderConfig // nil without a front proxy
	cache    *expirable.LRU[*x509.Certificate, *authenticator.Response]
	now      func() time.Time
}

func newCertCachingAuthenticator(delegate authenticator.Request, headers *authenticatorfactory.RequestHeaderConfig) *certCachingAuthenticator {
	return &certCachingAuthenticator{
		delegate: delegate,
		headers:  headers,
		cache:    expirable.NewLRU[*x509.Certificate, *authenticator.Response](certCacheSize, nil, certCacheTTL),
		now:      time.Now,
	}
}

func (a *certCachingAuthenticator) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 || a.carriesOtherCredentials(req) {
		return a.delegate.AuthenticateRequest(req)
	}
	leaf := req.TLS.PeerCertificates[0]
	now := a.now()
	if resp, ok := a.cache.Get(leaf); ok && now.Before(leaf.NotAfter) {
		return resp, true, nil
	}
	resp, ok, err := a.delegate.AuthenticateRequest(req)
	if ok && err == nil && resp != nil && resp.User.GetName() != user.Anonymous && now.Add(certCacheTTL).Before(leaf.NotAfter) {
		a.cache.Add(leaf, resp)
	}
	return resp, ok, err
}

// carriesOtherCredentials reports whether anything but the certificate
// could decide who the caller is.
func (a *certCachingAuthenticator) carriesOtherCredentials(req *http.Request) bool {
	if req.Header.Get("Authorization") != "" || req.Header.Get("Sec-WebSocket-Protocol") != "" {
		return true
	}
	return frontProxied(a.headers, req.Header)
}
