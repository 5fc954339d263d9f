package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/singleflight"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/satoken"
)

// tokenCheck asks kube-apiserver whether it accepts a client's bearer
// token now, before a new read with it is served on the token's hub
// connection. The connection was authenticated when it was dialed, and
// the hub authenticates it again at least once a minute, at the token's
// exp, and at once when it sees deleted what the token is bound to; a
// revocation the hub does not see at once (a bound object that is being
// deleted but still there, held by a finalizer, which kube-apiserver
// refuses from a minute past its deletionTimestamp; a token another
// authenticator revoked) would otherwise leave the connection serving new
// requests for up to that minute and the hub's 10 s token cache after
// kube-apiserver refuses them. Asked at each new read, kube-apiserver
// answers from its own token cache, as it would answer the read itself:
// through the endpoint a token stops opening reads at the moment it stops
// directly.
//
// The question is a SelfSubjectReview, which any authenticated caller may
// create and which stores nothing: its cost is one request that
// kube-apiserver answers from memory, where the read it replaces (a list,
// a watch and its events) stays on the hub. Only new reads ask; a
// client's open watches are the hub's to end. Reads of one token asked at
// the same moment (kube-proxy's informers starting together) share one
// question.
//
// A ServiceAccount token bound to a Pod, Secret or Node (kube-proxy's,
// every hour's) is not asked about: the hub decides it from the same
// objects kube-apiserver looks up, and ends its connection the moment
// they refuse it (at once on a deletion, at deletionTimestamp or exp
// plus kube-apiserver's leeway by the clock), no later than
// kube-apiserver, whose token cache accepts it up to 10 s longer. Asking
// at every new read would cost kube-apiserver a request at each of
// kube-proxy's watch renewals, every 5 to 10 minutes for each of its
// informers on every node. The claims are read unverified: another
// authenticator's JWT dressed with such claims is not asked about
// either, and reaches the hub only through its TokenReview, which then
// reviews it every --watch-reauthenticate-interval, as any token it
// cannot check locally (docs/api.md, "Authentication lifetime").
//
// A question kube-apiserver does not answer (unreachable, 5xx, 429, past
// tokenCheckTimeout) serves the read on the connection: the hub, which
// authenticated the token and keeps checking it, decides, as it keeps a
// connection whose check could not be made. An outage of kube-apiserver
// then costs kube-proxy nothing the hub can serve.
type tokenCheck struct {
	api      *rest.RESTClient // kube-apiserver, with no credential of its own
	inflight singleflight.Group
}

// tokenCheckTimeout bounds one question: kube-apiserver answers a token
// it holds in its cache from memory; slower than this it is in trouble,
// and the hub serves the read meanwhile.
const tokenCheckTimeout = 2 * time.Second

// The results of a check, the values of the client token checks metric's
// "result" label.
const (
	tokenAccepted = "accepted" // any answer but 401: the token authenticated
	tokenRefused  = "refused"  // 401: the read goes to kube-apiserver, which words it
	tokenError    = "error"    // no answer: the read is served on the connection
)

// selfSubjectReview is the body of the question: a SelfSubjectReview has
// no spec.
var selfSubjectReview = []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)

func newTokenCheck(cfg *rest.Config) (*tokenCheck, error) {
	api := rest.AnonymousClientConfig(cfg)
	api.Timeout = tokenCheckTimeout
	// No client-side rate limit: client-go's default (5 a second) made
	// every question wait its turn, 200 ms each in BenchmarkTokenCheck,
	// and a burst of reads (kube-proxy's informers starting) past the
	// timeout. Each question stands for a read the client made, which
	// it could as well have made of kube-apiserver directly with its
	// token (a made-up token has no connection, so no question); the
	// client's own flow control at kube-apiserver bounds them.
	api.QPS = -1
	c, err := restClient(api)
	if err != nil {
		return nil, err
	}
	return &tokenCheck{api: c}, nil
}

// tokenAsked reports whether a new read with token is asked about
// first: every token but a bound ServiceAccount token.
func tokenAsked(token string) bool {
	claims, ok := satoken.Parse(token)
	return !ok || !claims.Bound()
}

// refuses reports whether kube-apiserver refuses key's token now (401),
// and why; false when it accepts it or does not answer.
func (t *tokenCheck) refuses(ctx context.Context, key clientKey) (bool, error) {
	ch := t.inflight.DoChan(key.id, func() (any, error) {
		// Not the first caller's context: the others share the answer.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tokenCheckTimeout)
		defer cancel()
		return t.ask(ctx, key.token), nil
	})
	select {
	case r := <-ch:
		err, _ := r.Val.(error)
		result := tokenResult(err)
		clientTokenChecks.WithLabelValues(result).Inc()
		if result == tokenError {
			klog.V(2).InfoS("kube-apiserver did not answer whether it accepts a client's token; the hub serves the read", "err", err)
		}
		return result == tokenRefused, err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// ask posts a SelfSubjectReview with token and returns kube-apiserver's
// error, nil if it created one.
func (t *tokenCheck) ask(ctx context.Context, token string) error {
	err := t.api.Post().AbsPath("/apis/authentication.k8s.io/v1/selfsubjectreviews").
		SetHeader("Authorization", "Bearer "+token).SetHeader("Content-Type", "application/json").
		Body(selfSubjectReview).MaxRetries(0).Do(ctx).Error()
	if err != nil {
		return fmt.Errorf("ask kube-apiserver whether it accepts the token: %w", err)
	}
	return nil
}

// tokenResult reads kube-apiserver's answer: a 401 refuses the token;
// any other Status it chose to give (403, 404: its authorization or its
// routing, both after authentication) says the token authenticated; no
// answer, a 5xx or a 429 says nothing.
func tokenResult(err error) string {
	var st apierrors.APIStatus
	var netErr net.Error
	switch {
	case err == nil:
		return tokenAccepted
	case apierrors.IsUnauthorized(err):
		return tokenRefused
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr):
		return tokenError
	case errors.As(err, &st) && st.Status().Code < http.StatusInternalServerError && st.Status().Code != http.StatusTooManyRequests:
		return tokenAccepted
	default:
		return tokenError
	}
}
