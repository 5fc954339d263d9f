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
	routeUnserved   = "unserved"
)

var (
	shardMembers = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "nodeproxy", Subsystem: "hub", Name: "shard_members",
		Help:           "Hub replicas in this replica's shard table: every endpoint of --shard-service, ready or not, those gone less than 2 minutes ago, and this replica.",
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
			"served (this replica serves the node: its ready owner, or its secondary with the owner not ready), redirected (307 to the replica that serves it), " +
			"unserved (503: no ready replica holds the node, nor this one), moved (an open connection ended with 503 after its node went to another replica).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind", "decision"})
)
