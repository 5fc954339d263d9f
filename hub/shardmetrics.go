package hub

import (
	"k8s.io/component-base/metrics"
)

// The series of a sharded hub, registered with the others (registerMetrics).

// Why a node's request or connection went to another replica
// (nodeproxy_hub_shard_routing_total).
const (
	routeServed     = "served"
	routeRedirected = "redirected"
	routeMoved      = "moved"
)

var (
	shardMembers = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "nodeproxy", Subsystem: "hub", Name: "shard_members",
		Help:           "Hub replicas in this replica's shard table (--shard-service's ready endpoints, and this replica while it starts).",
		StabilityLevel: metrics.ALPHA,
	})
	shardRanges = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "nodeproxy", Subsystem: "hub", Name: "shard_ranges",
		Help:           "Ranges of nodes (of 4096) this replica, by role: owned (it serves their nodes), held (owned, or kept warm as the secondary).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"role"})
	shardTableChanges = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "hub", Name: "shard_table_changes_total",
		Help:           "New shard tables this replica made, each when the replicas it counts changed.",
		StabilityLevel: metrics.ALPHA,
	})
	shardRouting = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "hub", Name: "shard_routing_total",
		Help: "Nodes' bulk gets and bulk watch upgrades of a sharded hub, and their connections, by kind (get, watch) and decision: " +
			"served (this replica owns the node), redirected (307 to the owner), moved (an open connection ended with 503 after its node went to another replica).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind", "decision"})
)
