package hub

import (
	"net/http"

	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericfilters "k8s.io/apiserver/pkg/server/filters"

	"github.com/nodeproxy/nodeproxy/authorizer"
)

// buildHandlerChain serves the authorization webhook through a short
// filter chain and everything else through k8s.io/apiserver's default one.
//
// kube-apiserver asks the webhook about every node request it cannot
// answer from its cache; the default chain (tracing, audit, impersonation,
// timeouts in a second goroutine, latency tracking, ...) cost more than
// the decision itself several times over. The webhook keeps what it needs:
// panic recovery, request info, authentication, authorization of the
// caller, the in-flight limit, and the wait group that lets shutdown
// drain it. It does not honour impersonation: kube-apiserver never
// impersonates when it calls a webhook, and no one else should.
func buildHandlerChain(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
	full := genericapiserver.DefaultBuildHandlerChain(apiHandler, c)

	lean := apiHandler
	lean = genericapifilters.WithAuthorization(lean, c.Authorization.Authorizer, c.Serializer)
	lean = genericfilters.WithMaxInFlightLimit(lean, c.MaxRequestsInFlight, c.MaxMutatingRequestsInFlight, c.LongRunningFunc)
	lean = genericapifilters.WithAuthentication(lean, c.Authentication.Authenticator, genericapifilters.Unauthorized(c.Serializer),
		c.Authentication.APIAudiences, c.Authentication.RequestHeaderConfig)
	lean = genericfilters.WithWaitGroup(lean, c.LongRunningFunc, c.NonLongRunningRequestWaitGroup)
	lean = genericapifilters.WithRequestInfo(lean, c.RequestInfoResolver)
	lean = genericfilters.WithPanicRecovery(lean, c.RequestInfoResolver)

	full = withCredential(full)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == authorizer.WebhookPath {
			lean.ServeHTTP(w, r)
			return
		}
		full.ServeHTTP(w, r)
	})
}
