package endpoint

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
)

// Scrapers (Prometheus) reach /metrics on a port of its own, the way the
// kubelet lets them read its own: with a bearer token kube-apiserver
// vouches for (a TokenReview) of a user it allows "get" on the
// non-resource path /metrics (a SubjectAccessReview). The endpoint asks
// both as the node, which the Node authorizer and nodeproxy's allow. The
// kubelet port stays the node's alone.
//
// k8s.io/apiserver's delegating authenticator and authorizer would do
// this, but they link OpenTelemetry, OpenAPI and CEL (263 more packages)
// into a binary that runs on every node; two POSTs and two LRUs are what
// is used of them. Its token cache (pkg/authentication/token/cache)
// keeps allowed and refused tokens in one cache, which a flood of bad
// tokens empties of good ones, and does not bound the reviews: here the
// two are apart and the reviews of new tokens are rate-limited.
const (
	// scrapeAllowTTL and scrapeDenyTTL are how long a token's decision is
	// kept: a scraper every 15 s costs kube-apiserver two reviews every
	// two minutes; a grant takes effect within 10 s. Errors are not kept.
	scrapeAllowTTL = 2 * time.Minute
	scrapeDenyTTL  = 10 * time.Second
	// scrapeAllowSize tokens are remembered as allowed: a node has a few
	// scrapers. Only an allowed token takes a place there, so no number
	// of bad tokens evicts a good one.
	scrapeAllowSize = 64
	// scrapeDenySize tokens are remembered as refused, apart, so that a
	// scraper with a bad token costs one review per scrapeDenyTTL. The
	// review rate bounds how many can arrive in that time (at most
	// scrapeReviewBurst + scrapeReviewRate*10 = 20); the room is for
	// that, with margin.
	scrapeDenySize = 256
	// scrapeReviewRate and scrapeReviewBurst bound the reviews of tokens
	// in neither cache: each is a TokenReview (and, if it authenticates,
	// a SubjectAccessReview) as the node, which anyone who reaches the
	// port could otherwise make at will with random tokens. A burst of
	// 10 lets a dozen scrapers start together; past it, one new token a
	// second is reviewed and the rest are answered 429 with Retry-After,
	// as kube-apiserver's own flow control answers. Tokens already
	// allowed are served whatever the rate.
	scrapeReviewRate  = 1
	scrapeReviewBurst = 10
)

// errThrottled is decide's answer to a token it would have to review
// past the review rate.
var errThrottled = errors.New("too many tokens to review")

// scrapeDecision is kube-apiserver's answer for one token.
type scrapeDecision struct {
	allowed bool
	// err is the Status to answer when not allowed.
	err error
}

type scrapers struct {
	api *rest.RESTClient
	// allowed and denied remember decisions by the token's SHA-256, never
	// the token: two caches, so that refused tokens cannot push allowed
	// ones out.
	allowed *expirable.LRU[[sha256.Size]byte, scrapeDecision]
	denied  *expirable.LRU[[sha256.Size]byte, scrapeDecision]
	reviews flowcontrol.RateLimiter
}

func newScrapers(api *rest.RESTClient) *scrapers {
	return &scrapers{
		api:     api,
		allowed: expirable.NewLRU[[sha256.Size]byte, scrapeDecision](scrapeAllowSize, nil, scrapeAllowTTL),
		denied:  expirable.NewLRU[[sha256.Size]byte, scrapeDecision](scrapeDenySize, nil, scrapeDenyTTL),
		reviews: flowcontrol.NewTokenBucketRateLimiter(scrapeReviewRate, scrapeReviewBurst),
	}
}

// wrap serves next to callers kube-apiserver allows to get path.
func (s *scrapers) wrap(path string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		token, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			refused.WithLabelValues("unauthenticated").Inc()
			writeError(w, req, apierrors.NewUnauthorized("a bearer token is required"))
			return
		}
		d, err := s.decide(req.Context(), token, path)
		if errors.Is(err, errThrottled) {
			refused.WithLabelValues("throttled").Inc()
			w.Header().Set("Retry-After", "1")
			writeError(w, req, apierrors.NewTooManyRequests("too many new tokens to review; try again later", 1))
			return
		}
		if err != nil {
			// Never an allow on error, and nothing kept: the next scrape
			// asks again. The caller is not yet known: kube-apiserver's
			// error goes to the log, not to it.
			klog.V(2).InfoS("Could not check a scraper's token", "err", err)
			writeError(w, req, apierrors.NewServiceUnavailable("cannot check the token with kube-apiserver"))
			return
		}
		if !d.allowed {
			reason := "forbidden"
			if apierrors.IsUnauthorized(d.err) {
				reason = "unauthenticated"
			}
			refused.WithLabelValues(reason).Inc()
			writeError(w, req, d.err)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// decide returns the cached decision for token, or asks kube-apiserver
// if the review rate allows.
func (s *scrapers) decide(ctx context.Context, token, path string) (scrapeDecision, error) {
	key := sha256.Sum256([]byte(token))
	if d, ok := s.allowed.Get(key); ok {
		return d, nil
	}
	if d, ok := s.denied.Get(key); ok {
		return d, nil
	}
	if !s.reviews.TryAccept() {
		return scrapeDecision{}, errThrottled
	}
	d, err := s.review(ctx, token, path)
	switch {
	case err != nil:
		scrapeReviews.WithLabelValues("error").Inc()
		return d, err
	case d.allowed:
		scrapeReviews.WithLabelValues("allowed").Inc()
		s.allowed.Add(key, d)
	default:
		scrapeReviews.WithLabelValues("refused").Inc()
		s.denied.Add(key, d)
	}
	return d, nil
}

// review asks kube-apiserver who token is and whether they may get path.
func (s *scrapers) review(ctx context.Context, token, path string) (scrapeDecision, error) {
	var tr authenticationv1.TokenReview
	if err := s.post(ctx, "/apis/authentication.k8s.io/v1/tokenreviews", &authenticationv1.TokenReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenReview"},
		Spec:     authenticationv1.TokenReviewSpec{Token: token},
	}, &tr); err != nil {
		return scrapeDecision{}, err
	}
	if !tr.Status.Authenticated {
		msg := "the bearer token is not valid"
		if tr.Status.Error != "" {
			msg += ": " + tr.Status.Error
		}
		return scrapeDecision{err: apierrors.NewUnauthorized(msg)}, nil
	}
	u := tr.Status.User
	extra := make(map[string]authorizationv1.ExtraValue, len(u.Extra))
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	var sar authorizationv1.SubjectAccessReview
	if err := s.post(ctx, "/apis/authorization.k8s.io/v1/subjectaccessreviews", &authorizationv1.SubjectAccessReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview"},
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: "get"},
		},
	}, &sar); err != nil {
		return scrapeDecision{}, err
	}
	if !sar.Status.Allowed || sar.Status.Denied {
		return scrapeDecision{err: apierrors.NewForbidden(schemaEndpoint, path,
			fmt.Errorf("user %q may not get %s: %s", u.Username, path, sar.Status.Reason))}, nil
	}
	return scrapeDecision{allowed: true}, nil
}

// post sends in as JSON and decodes the answer into out.
func (s *scrapers) post(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	raw, err := s.api.Post().AbsPath(path).SetHeader("Content-Type", "application/json").SetHeader("Accept", "application/json").Body(body).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("POST %s: decode the answer: %w", path, err)
	}
	return nil
}
