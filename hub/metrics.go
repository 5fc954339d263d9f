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
		Help: "Open bulk watch connections (bulk watch channels and node views) authenticated again, by result: ok; " +
			"unauthorized (the credential no longer authenticates, or names someone else: every channel ended with 401 and the connection closed); " +
			"revoked (the token's ServiceAccount, or the Secret, Pod or Node it is bound to, deleted: every channel ended with 401 and the connection closed at once); " +
			"error (the check could not be made: kept, checked again in 10 s); max_age (the connection reached --watch-max-connection-age and ended with 503, for the client to resume elsewhere).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	rbacChangesSeen = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy",
		Subsystem: "hub",
		Name:      "rbac_changes_total",
		Help: "Changes of RBAC objects the hub saw (updates and deletions; creations only grant), by kind (ClusterRole, ClusterRoleBinding, Role, RoleBinding), " +
			"change (update, delete) and effect: recheck (it may take access from the users it names: their open bulk watch channels are authorized again), " +
			"nobody (it takes access from no one: a binding's update that dropped no subject, a role's that left its rules alone, a role nothing binds).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind", "change", "effect"})

	registerOnce sync.Once
)

// registerMetrics registers the hub's metrics with the legacy registry
// that /metrics serves.
func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(bulkEntries, reauthentications, rbacChangesSeen) })
}
