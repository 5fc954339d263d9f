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

	registerOnce sync.Once
)

// registerMetrics registers the hub's metrics with the legacy registry
// that /metrics serves.
func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(bulkEntries) })
}
