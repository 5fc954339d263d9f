package hub

import (
	"net/http"
	"strings"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
)

// ages are how long a bulk watch connection lives at most, by what the
// hub can check of its caller meanwhile.
//
// A direct connection's caller is authenticated again every minute (a
// bound ServiceAccount token from the cache, any other by a review, a
// certificate against the CA) and its channels are authorized again when
// RBAC changes; its age only bounds what neither sees, and each
// reconnection costs kube-apiserver reviews, so it is long. A connection
// through kube-apiserver's aggregator carries its caller as the front
// proxy's headers: the hub cannot authenticate the caller's own
// credential again, and the age is when kube-apiserver does, as the
// client reconnects.
type ages struct {
	direct, aggregated time.Duration
	// frontProxy names the headers a front proxy puts its caller in
	// (nil: no front proxy is trusted, every connection is direct).
	frontProxy *authenticatorfactory.RequestHeaderConfig
}

// of is the maximum age of cred's connection.
func (a ages) of(cred *credential) time.Duration {
	if a.aggregated > 0 && frontProxied(a.frontProxy, cred.header) {
		return a.aggregated
	}
	return a.direct
}

// frontProxied reports whether h carries a front proxy's identity
// headers, which headers, when the front proxy's certificate verifies,
// decide who the caller is.
func frontProxied(headers *authenticatorfactory.RequestHeaderConfig, h http.Header) bool {
	if headers == nil {
		return false
	}
	for _, names := range []headerrequest.StringSliceProvider{headers.UsernameHeaders, headers.UIDHeaders, headers.GroupHeaders} {
		if names == nil {
			continue
		}
		for _, name := range names.Value() {
			if h.Get(name) != "" {
				return true
			}
		}
	}
	if headers.ExtraHeaderPrefixes != nil {
		for _, prefix := range headers.ExtraHeaderPrefixes.Value() {
			for name := range h {
				if strings.HasPrefix(strings.ToLower(name), strings.ToLower(prefix)) {
					return true
				}
			}
		}
	}
	return false
}
