package hub

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
)

// serviceAccountLeeway is the leeway kube-apiserver's service account
// authenticator gives a token's times and its objects' deletions
// (k8s.io/kubernetes pkg/serviceaccount/claims.go validates the times
// with go-jose's default leeway, a minute, and takes an object as deleted
// only once its deletionTimestamp is more than that minute past).
const serviceAccountLeeway = time.Minute

// verdict is what the local check concludes.
type verdict int

const (
	// verdictReview: the local check cannot decide (an object missing
	// from the hub's cache, whose kube-apiserver would look it up live;
	// a type whose cache is not fresh): kube-apiserver is asked.
	verdictReview verdict = iota
	// verdictAllow: kube-apiserver's service account authenticator,
	// given the state the hub's cache holds, accepts the token now.
	verdictAllow
	// verdictRefuse: it refuses it.
	verdictRefuse
)

// localDecision is the local check's answer at one instant.
type localDecision struct {
	verdict verdict
	// reason says why it refused or could not decide; for logs.
	reason string
	// fallback, when it could not decide, is why in a word
	// (nodeproxy_hub_reauthentication_local_fallbacks_total).
	fallback string
	// until, when allowed or reviewed, is the first instant at which
	// time alone (the token's exp, an object's deletionTimestamp, each
	// plus the leeway) makes what the cache holds refused; zero when
	// nothing does.
	until time.Time
}

// lookupResult is what the hub's cache says of one object.
type lookupResult int

const (
	lookupFound lookupResult = iota
	// lookupMissing: the cache, fresh, does not hold it. Not a refusal:
	// kube-apiserver's getter, finding it missing from its informer,
	// asks etcd, and the object may be newer than the cache.
	lookupMissing
	// lookupStale: the type's cache is not fresh enough to stand in for
	// kube-apiserver's (cache.Store.HeardWithin).
	lookupStale
)

// objectLookup is the hub's cache of the objects a token names: the
// resource's object namespace/name ("" for a Node) as the cache holds it.
type objectLookup interface {
	lookup(resource, namespace, name string) (metav1.Object, lookupResult)
}

// isBoundToken reports whether claims are those of a ServiceAccount token
// bound to an object (a Pod, a Secret or a Node: a TokenRequest's), the
// only tokens the local check decides. A legacy secret-based token has no
// kubernetes.io claims, and an unbound token names nothing whose deletion
// would end it; both are reviewed.
func isBoundToken(claims tokenClaims) bool { return claims.Bound() }

// authenticatedAs reports whether resp is the user kube-apiserver's
// service account authenticator makes of claims: its ServiceAccount's
// name and UID, and the pod it is bound to. It tells a token that
// authenticator accepted from one that only looks like it (an OIDC or
// webhook token with the same claims), which the local check must not
// decide.
func authenticatedAs(resp *authenticator.Response, claims tokenClaims) bool {
	if resp == nil || !isBoundToken(claims) {
		return false
	}
	k := claims.Kubernetes
	u := resp.User
	if u.GetName() != serviceaccount.MakeUsername(k.Namespace, k.ServiceAccount.Name) || u.GetUID() != string(k.ServiceAccount.UID) {
		return false
	}
	if k.Pod != nil {
		uid := u.GetExtra()[serviceaccount.PodUIDKey]
		return len(uid) == 1 && uid[0] == string(k.Pod.UID)
	}
	return true
}

// deletedAfterLeeway is the first instant at which an object whose
// deletionTimestamp is at counts as deleted: once at is more than the
// leeway ago. Zero for zero.
func deletedAfterLeeway(at time.Time) time.Time {
	if at.IsZero() {
		return at
	}
	return at.Add(serviceAccountLeeway).Add(time.Nanosecond)
}

// sooner is the earlier of a and b, a zero one standing for never.
func sooner(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// namedRef is an object a token's claims name, with where to find it.
type namedRef struct {
	resource, namespace string
	ref                 *boundRef
}

// decideLocally decides a bound ServiceAccount token at now as
// kube-apiserver's service account authenticator would from the objects
// objs holds: its times within the leeway, then its ServiceAccount, and
// the Secret or Pod it is bound to (or the Node, for a token bound to a
// Node alone: a pod-bound token's node claims are not checked), each
// present with the UID the claims name and not deleted more than the
// leeway ago. What that authenticator checks before (the signature, the
// issuer, the audiences) is its configuration, which no object shows:
// the canary reviews answer for it (canary.go).
//
// Any rule that refuses refuses: kube-apiserver would refuse the token
// whatever it found of the objects the hub could not see. Otherwise an
// object the hub cannot vouch for asks for a review.
func decideLocally(claims tokenClaims, objs objectLookup, now time.Time) localDecision {
	if !isBoundToken(claims) {
		return localDecision{verdict: verdictReview, reason: "not a bound service account token", fallback: fallbackUnbound}
	}
	var until time.Time
	// The times first, as go-jose's validation of the claims does.
	switch {
	case claims.Nbf != nil && now.Add(serviceAccountLeeway).Before(time.Unix(*claims.Nbf, 0)):
		return localDecision{verdict: verdictRefuse, reason: "service account token is not valid yet"}
	case claims.Iat != nil && now.Add(serviceAccountLeeway).Before(time.Unix(*claims.Iat, 0)):
		return localDecision{verdict: verdictRefuse, reason: "service account token is issued in the future"}
	case claims.Exp != nil:
		expired := time.Unix(*claims.Exp, 0).Add(serviceAccountLeeway)
		if now.After(expired) {
			return localDecision{verdict: verdictRefuse, reason: "service account token has expired"}
		}
		until = sooner(until, expired.Add(time.Nanosecond))
	}

	k := claims.Kubernetes
	refs := []namedRef{
		{"serviceaccounts", k.Namespace, k.ServiceAccount},
		{"secrets", k.Namespace, k.Secret},
		{"pods", k.Namespace, k.Pod},
	}
	if k.Pod == nil {
		refs = append(refs, namedRef{"nodes", "", k.Node})
	}
	// An object is taken as deleted once its deletionTimestamp is before
	// deletedBefore.
	deletedBefore := now.Add(-serviceAccountLeeway)
	review, fallback := "", ""
	for _, r := range refs {
		if r.ref == nil {
			continue
		}
		obj, found := objs.lookup(r.resource, r.namespace, r.ref.Name)
		switch found {
		case lookupStale:
			review, fallback = fmt.Sprintf("the cache of %s is not fresh", r.resource), fallbackStale
			continue
		case lookupMissing:
			review, fallback = fmt.Sprintf("%s %s/%s is not in the cache", r.resource, r.namespace, r.ref.Name), fallbackMissing
			continue
		}
		if obj.GetUID() != r.ref.UID {
			return localDecision{verdict: verdictRefuse, reason: fmt.Sprintf("%s %s/%s has UID %s, not the claims' %s", r.resource, r.namespace, r.ref.Name, obj.GetUID(), r.ref.UID)}
		}
		if dt := obj.GetDeletionTimestamp(); dt != nil {
			if dt.Time.Before(deletedBefore) {
				return localDecision{verdict: verdictRefuse, reason: fmt.Sprintf("%s %s/%s was deleted at %s", r.resource, r.namespace, r.ref.Name, dt.UTC().Format(time.RFC3339))}
			}
			until = sooner(until, deletedAfterLeeway(dt.Time))
		}
	}
	if review != "" {
		// until still says when time alone refuses what the cache
		// does show: the review now cannot see that instant coming.
		return localDecision{verdict: verdictReview, reason: review, fallback: fallback, until: until}
	}
	return localDecision{verdict: verdictAllow, until: until}
}
