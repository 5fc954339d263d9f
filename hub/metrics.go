package hub

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

const (
	entryByNodeIdentity = "node_identity"
	entryDelegated      = "delegated"
)

// How a re-authentication was decided, and its result
// (nodeproxy_hub_reauthentications_total).
const (
	decidedByLocal  = "local"
	decidedByReview = "review"
	decidedByCanary = "canary"
	decidedByAge    = "age"

	resultOK           = "ok"
	resultUnauthorized = "unauthorized"
	resultRevoked      = "revoked"
	resultError        = "error"
	resultMaxAge       = "max_age"
)

// Why a bound token's check was a review
// (nodeproxy_hub_reauthentication_local_fallbacks_total).
const (
	fallbackStale       = "stale"
	fallbackMissing     = "missing"
	fallbackDistrusted  = "distrusted"
	fallbackUnconfirmed = "unconfirmed"
	// fallbackUnbound is never counted: only bound tokens are decided
	// locally.
	fallbackUnbound = "unbound"
)

var (
	bulkEntries = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy",
		Subsystem: "hub",
		Name:      "bulk_entry_decisions_total",
		Help: "Requests at the door of the bulk API (create or watch bulkgetoperations), by who decided " +
			"(node_identity: a node, let in without asking kube-apiserver; delegated: a SubjectAccessReview, " +
			"possibly cached) and outcome (allow, deny, error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"decided_by", "outcome"})
	reauthentications = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy",
		Subsystem: "hub",
		Name:      "reauthentications_total",
		Help: "Open bulk watch connections (bulk watch channels and node views) authenticated again, by how it was decided " +
			"(local: a bound ServiceAccount token decided from its claims and the hub's cache, no request to kube-apiserver; " +
			"review: the hub's authenticator, a TokenReview through its shared cache or a client certificate against the client CA; " +
			"canary: the one TokenReview a re-check interval of a token class, standing for every token of it checked locally; " +
			"age: --watch-max-connection-age) and result: ok; " +
			"unauthorized (the credential no longer authenticates, or names someone else: every channel ended with 401 and the connection closed; " +
			"a refused canary has every token of its class reviewed at once); " +
			"revoked (the token's ServiceAccount, or the Secret, Pod or Node it is bound to, deleted: every channel ended with 401 and the connection closed at once); " +
			"error (the check could not be made: kept, checked again in 10 s); max_age (the connection reached --watch-max-connection-age and ended with 503, for the client to resume elsewhere).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"decided_by", "result"})
	rbacChangesSeen = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy",
		Subsystem: "hub",
		Name:      "rbac_changes_total",
		Help: "Changes of RBAC objects the hub saw (updates and deletions; creations only grant), by kind (ClusterRole, ClusterRoleBinding, Role, RoleBinding), " +
			"change (update, delete) and effect: recheck (it may take access from the users it names: their open bulk watch channels are authorized again), " +
			"nobody (it takes access from no one: a binding's update that dropped no subject, a role's that left its rules alone, a role nothing binds).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind", "change", "effect"})

	localFallbacks = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy",
		Subsystem: "hub",
		Name:      "reauthentication_local_fallbacks_total",
		Help: "Checks of open connections' bound ServiceAccount tokens made by TokenReview because the local check could not stand in, by reason: " +
			"stale (the cache of a type the check needs not heard from kube-apiserver within --node-view-heard-within, or its watch failing); " +
			"missing (an object the token names not in the cache: kube-apiserver would look it up live); " +
			"distrusted (its class's canary was refused, and no review has accepted the token since); " +
			"unconfirmed (no review yet showed kube-apiserver's service account authenticator accepting it as its claims' user).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})

	localProofs = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy",
		Subsystem: "hub",
		Name:      "reauthentication_freshness_proofs_total",
		Help: "Types the local check of bound tokens asked kube-apiserver to show as fresh, having heard nothing from it within --node-view-heard-within " +
			"(a quiet type), by resource and result: fresh (shown current: checks decide locally for --node-view-heard-within more), " +
			"stale (not shown within 4 s: the checks that needed it are reviews).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "result"})

	registerOnce sync.Once
)

// registerMetrics registers the hub's metrics with the legacy registry
// that /metrics serves.
func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(bulkEntries, reauthentications, rbacChangesSeen, localFallbacks, localProofs,
			shardMembers, shardRanges, shardTableChanges, shardRouting)
	})
}
