package hub

import (
	"context"
	"crypto/tls"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/klog/v2"
)

// reauthenticator authenticates the caller of each open bulk watch
// connection (its bulk watch channels and its node view alike) again,
// with the hub's own authenticator, as kube-apiserver would authenticate
// a new request with the same credential now: a bearer token through the
// delegated TokenReview and its cache (shared by every connection and
// request with that token: one review answers them all, for at most the
// cache's TTL, --authentication-token-webhook-cache-ttl, 10 s as
// kube-apiserver's own), a client certificate against the client CA as
// loaded now and its NotAfter.
//
// Each connection is checked at a jittered interval of at most
// ReauthenticateInterval, and at its credential's own expiry (the
// certificate's NotAfter, the token's exp claim). When the credential no
// longer authenticates, or authenticates as someone else, every channel
// ends with ERROR 401 in kube-apiserver's words and the connection
// closes. A check that cannot be made (the review timed out, kube-apiserver
// unreachable) keeps the connection, is counted, and is made again
// sooner; MaxConnectionAge bounds how long such a connection, and
// whatever a check cannot see (a caller through kube-apiserver's
// aggregator, which the hub knows only by the front proxy's
// certificate), lives: at its age, jittered, the connection ends with
// ERROR 503 and the client resumes on a new one, authenticated afresh.
//
// A ServiceAccount token's connection also ends with 401 the moment the
// hub's cache sees deleted the ServiceAccount, or the Secret, Pod or Node
// the token is bound to (boundObjects): kube-apiserver refuses the token
// from then on, and the minute's check would see it late.
//
// A ServiceAccount token bound to an object (a pod's projected token:
// every kube-proxy's) that kube-apiserver's service account authenticator
// accepted is, between reviews, checked locally (decideLocally): as that
// authenticator would decide it now from the objects in the hub's cache,
// when the cache holds every one of them and each type's cache is fresh;
// otherwise it is reviewed. A local check also schedules the next one at
// the instant time alone would refuse it (a pod in graceful deletion: its
// deletionTimestamp plus the leeway). What no object shows, the
// authenticator's configuration, one canary review a class a re-check
// interval answers for (canaries). So the TokenReviews a minute no longer
// grow with the number of connections (docs/benchmarks.md,
// "Re-authenticating open connections").
type reauthenticator struct {
	authn authenticator.Request
	// bound ends a connection at once when an object its token names is
	// deleted (nil: only the checks do).
	bound *boundObjects
	// objects are what the local check reads (nil: every check is a
	// review).
	objects  objectLookup
	canaries *canaries
	interval time.Duration
	maxAge   ages
	retry    time.Duration // after a check that could not be made: reauthenticateRetry
	now      func() time.Time
	jitter   func(time.Duration) time.Duration
}

// reauthenticateTimeout bounds one check: the delegated authenticator's
// own webhook timeout is 10 s.
const reauthenticateTimeout = 10 * time.Second

// reauthenticateRetry is how soon a check that could not be made is made
// again.
const reauthenticateRetry = 10 * time.Second

// newReauthenticator checks connections with authn, and, with objects,
// bound tokens locally between reviews.
func newReauthenticator(authn authenticator.Request, bound *boundObjects, objects objectLookup, interval time.Duration, maxAge ages) *reauthenticator {
	a := &reauthenticator{authn: authn, bound: bound, objects: objects, interval: interval, maxAge: maxAge, retry: reauthenticateRetry, now: time.Now,
		// Spread over the last quarter: a thousand connections opened
		// together are not all checked in the same second.
		jitter: func(d time.Duration) time.Duration { return d - time.Duration(rand.Int64N(int64(d/4)+1)) }}
	a.canaries = newCanaries(a.check, interval, reauthenticateRetry, func(d time.Duration) time.Duration { return a.jitter(d) })
	return a
}

// credential is what authenticated a connection: the upgrade request's
// headers, as they came (the authentication filter removes the
// Authorization header), and its TLS state.
type credential struct {
	header http.Header
	tls    *tls.ConnectionState
}

type credentialKey struct{}

// withCredential keeps req's credential in its context for follow.
// Outside every filter, before authentication.
func withCredential(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isBulkWatchUpgrade(r) {
			r = r.WithContext(context.WithValue(r.Context(), credentialKey{}, &credential{header: r.Header.Clone(), tls: r.TLS}))
		}
		next.ServeHTTP(w, r)
	})
}

// Unauthorized is kube-apiserver's answer to a credential it does not
// accept, word for word.
func unauthorized() *metav1.Status {
	st := apierrors.NewUnauthorized("Unauthorized").ErrStatus
	return &st
}

// follow checks the connection of r until ctx ends, and yields the
// status to end it with: 401 when its credential no longer
// authenticates, 503 at its maximum age.
func (a *reauthenticator) follow(ctx context.Context, r *http.Request) <-chan *metav1.Status {
	end := make(chan *metav1.Status, 1)
	a.followInto(ctx, r, end)
	return end
}

// followInto is follow, yielding on end, where it sends at most once:
// a connection that something else may end too shares one channel.
func (a *reauthenticator) followInto(ctx context.Context, r *http.Request, end chan<- *metav1.Status) {
	cred, _ := r.Context().Value(credentialKey{}).(*credential)
	if cred == nil {
		return // not a bulk watch upgrade
	}
	first, ok, err := a.check(ctx, cred)
	if err != nil || !ok {
		// It authenticated a moment ago: the next check decides.
		first = nil
	}
	claims, _ := claimsOf(cred)
	m := newMember(cred, claims, first)
	leave := func() {}
	// Only a bound ServiceAccount token may be checked locally.
	local := a.objects != nil && isBoundToken(claims)
	if local {
		leave = a.canaries.join(m)
	}
	revocation, stopRevoked := a.bound.follow(boundUIDs(cred))
	go func() {
		defer stopRevoked()
		defer leave()
		opened := a.now()
		age := time.NewTimer(a.jitter(a.maxAge.of(cred)))
		defer age.Stop()
		next := a.nextCheck(cred, a.interval)
		if local {
			// Checked locally at once, which costs kube-apiserver
			// nothing: an object the token names may have been marked
			// for deletion before the connection opened (kube-apiserver's
			// token cache accepts the token up to 10 s past its rule), and
			// no later mark would time its refusal.
			next = 0
		}
		for {
			t := time.NewTimer(next)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-revocation.done:
				t.Stop()
				reauthentications.WithLabelValues(decidedByLocal, resultRevoked).Inc()
				klog.V(2).InfoS("An object the bulk watch connection's token is bound to was deleted; ending its channels with 401")
				end <- unauthorized()
				return
			case <-m.refused:
				t.Stop()
				klog.V(2).InfoS("kube-apiserver refused the bulk watch connection's token when its class was reviewed; ending its channels with 401")
				end <- unauthorized()
				return
			case <-age.C:
				t.Stop()
				reauthentications.WithLabelValues(decidedByAge, resultMaxAge).Inc()
				klog.V(2).InfoS("Bulk watch connection at its maximum age; ending it so that the client resumes on a new one", "age", a.now().Sub(opened).Round(time.Second))
				end <- &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable,
					Message: "the connection reached its maximum age; resubscribe"}
				return
			case <-revocation.changed:
				// An object it names is marked for deletion: decide now,
				// which times the refusal to come.
				t.Stop()
			case <-t.C:
			}
			// until is when time alone refuses the token: as the cache
			// shows its objects, or as the deletion marks seen say.
			until := deletedAfterLeeway(revocation.deletingAt())
			if local {
				d, decided := a.checkLocally(m)
				if decided && d.verdict == verdictRefuse {
					end <- unauthorized()
					return
				}
				if until = sooner(until, d.until); decided {
					next = a.until(a.jitter(a.interval), until)
					continue
				}
			}
			resp, ok, err := a.check(ctx, cred)
			switch {
			case ctx.Err() != nil:
				return
			case !ok && transient(err):
				reauthentications.WithLabelValues(decidedByReview, resultError).Inc()
				klog.ErrorS(err, "Authenticating an open bulk watch connection again; keeping it until the next check")
				next = a.until(a.retry, until)
				continue
			case !ok, !m.sameAs(resp):
				reauthentications.WithLabelValues(decidedByReview, resultUnauthorized).Inc()
				klog.V(2).InfoS("Bulk watch connection's credential no longer authenticates; ending its channels with 401", "err", err)
				end <- unauthorized()
				return
			}
			m.distrusted.Store(false)
			reauthentications.WithLabelValues(decidedByReview, resultOK).Inc()
			// A pod in graceful deletion whose other objects the cache
			// could not vouch for is still checked when its time comes.
			next = a.until(a.nextCheck(cred, a.interval), until)
		}
	}()
}

// until is the wait d, or until the instant at if that comes sooner.
func (a *reauthenticator) until(d time.Duration, at time.Time) time.Duration {
	if at.IsZero() {
		return d
	}
	if !at.After(a.now()) {
		// The instant passed and a review still accepted the token:
		// kube-apiserver's token cache (10 s) answered. Asked again
		// after the retry, past it, not in a loop until it lets go.
		return min(d, a.retry)
	}
	return min(d, at.Sub(a.now()))
}

// checkLocally decides m from its claims and the cache, if it may, and
// counts how; false: the check is to be a review, before the decision's
// until, if any.
func (a *reauthenticator) checkLocally(m *member) (localDecision, bool) {
	d := decideLocally(m.claims, a.objects, a.now())
	if why := m.whyNotLocal(); why != "" {
		localFallbacks.WithLabelValues(why).Inc()
		return localDecision{verdict: verdictReview, until: d.until}, false
	}
	switch d.verdict {
	case verdictAllow:
		m.passed.Store(true)
		reauthentications.WithLabelValues(decidedByLocal, resultOK).Inc()
		return d, true
	case verdictRefuse:
		reauthentications.WithLabelValues(decidedByLocal, resultUnauthorized).Inc()
		klog.V(2).InfoS("Bulk watch connection's token is no longer valid by its claims and the objects they name; ending its channels with 401", "reason", d.reason)
		return d, true
	}
	m.passed.Store(false)
	localFallbacks.WithLabelValues(d.fallback).Inc()
	klog.V(4).InfoS("Reviewing a bound token the local check cannot decide", "reason", d.reason)
	return d, false
}

// check authenticates cred as the hub's authentication filter would.
func (a *reauthenticator) check(ctx context.Context, cred *credential) (*authenticator.Response, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, reauthenticateTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	if err != nil {
		return nil, false, err
	}
	req.Header, req.TLS = cred.header.Clone(), cred.tls
	return a.authn.AuthenticateRequest(req)
}

// nextCheck is the wait before the next check: interval, jittered, or
// until just after the credential expires if that is sooner.
func (a *reauthenticator) nextCheck(cred *credential, interval time.Duration) time.Duration {
	d := a.jitter(interval)
	if exp, ok := expiry(cred); ok {
		if until := exp.Sub(a.now()) + time.Second; until < d {
			d = max(until, time.Second)
		}
	}
	return d
}

// expiry is when cred stops being valid by its own terms: the client
// certificate's NotAfter, or a JWT bearer token's exp claim (read, not
// verified: it only chooses when to ask).
func expiry(cred *credential) (time.Time, bool) {
	if cred.tls != nil && len(cred.tls.PeerCertificates) > 0 {
		return cred.tls.PeerCertificates[0].NotAfter, true
	}
	return tokenExpiry(cred)
}

// transient reports whether err says the check could not be made, rather
// than that the credential was refused: a timeout, a network error, or
// kube-apiserver failing or busy.
func transient(err error) bool {
	if err == nil {
		return false
	}
	var netErr net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) {
		return true
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		code := st.Status().Code
		return code >= 500 || code == http.StatusTooManyRequests
	}
	return false
}

// sameUser reports whether b is the identity a was: a token or
// certificate that now names someone else is not the connection's.
func sameUser(a, b *authenticator.Response) bool {
	return a.User.GetName() == b.User.GetName() && a.User.GetUID() == b.User.GetUID()
}
