package endpoint

import (
	"k8s.io/component-base/metrics"
)

// pathCopy is the "path" label of requests answered from the copy of the
// node's view.
const pathCopy = "copy"

// pathMemory is the "path" label of the kubelet's gets of its Lease
// answered from the endpoint's memory of it (lease.go).
const pathMemory = "memory"

var (
	viewBatches = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "view_batches_total",
		Help:           "Batches of the node view applied to the endpoint's copy.",
		StabilityLevel: metrics.ALPHA,
	})
	viewRefused = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "view_refused_objects_total",
		Help: "Objects of the node view the endpoint refused to keep: outside the node's view whatever the graph (a pod of another node, " +
			"another node's Node), or unreadable. Never served.",
		StabilityLevel: metrics.ALPHA,
	})
	viewReopens = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "view_reopens_total",
		Help: "Node views opened again by the endpoint, by reason: expired (the hub could not resume from the copy's position: the view opened afresh, its initial state replacing the copy), " +
			"ended (no replica took the channel back within 5 s: opened again from the copy's position), older_hub (the hub refused the newest version of the view: opened at the first), " +
			"invalid (a batch the copy could not apply: a position that does not parse or names other types, a change before the initial state: opened afresh), " +
			"behind (a view afresh from a replica behind the copy, refused: opened afresh again a moment later).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	copyReads = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "copy_reads_total",
		Help: "Reads of the kubelet answered from the copy of the node's view, by mode: live (the copy follows the hub), " +
			"offline (neither the hub nor kube-apiserver reachable: the copy as it was when the node lost them).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"mode"})
	viewResumesRefused = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "view_resumes_refused_total",
		Help: "Batches of the node view the endpoint refused because their position went back past what the copy holds " +
			"(a replica behind the copy's last change of a type): the copy kept what it had, and the view was resumed again from its position, not opened afresh.",
		StabilityLevel: metrics.ALPHA,
	})
	copyRestores = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "copy_restores_total",
		Help: "Copies of the node's view loaded from --node-view-dir at start, by how their age was known: boot_clock (saved in this boot), " +
			"wall_clock (saved in an earlier boot, the wall clock synchronized), unproven (saved in an earlier boot, the wall clock not synchronized " +
			"or putting the save in the future: not served offline until the copy has followed the hub again).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"age"})
	copyAge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "copy_age_seconds",
		Help:           "How long the copy of the node's view has not followed the hub: 0 while it does; -1 while it holds no view. Updated every 5 s.",
		StabilityLevel: metrics.ALPHA,
	})
	copyObjects = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "copy_objects",
		Help:           "Objects in the copy of the node's view.",
		StabilityLevel: metrics.ALPHA,
	})
	syncs = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "copy_consistent_reads_total",
		Help: "Consistent reads (resourceVersion \"\") of the copy while it follows the hub, by result: ok (answered once the copy held what the hub had when the read came), " +
			"timeout (no answer to the progress request within 5 s: the read went to the hub or kube-apiserver), " +
			"unconfirmed (no answer, and kube-apiserver did not answer the node either: the copy as it is, as offline).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	progressRequests = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "view_progress_requests_total",
		Help:           "Progress requests sent on the node view's channel, each shared by the consistent reads that arrived before it was sent.",
		StabilityLevel: metrics.ALPHA,
	})
	leaseForgets = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "lease_forgets_total",
		Help: "Times the endpoint forgot the node's Lease, which it remembers from the kubelet's writes of it to answer the kubelet's gets, " +
			"so that the next get went to kube-apiserver, by reason: conflict (a renewal got 409: someone else wrote the Lease), not_found (404: deleted), " +
			"failed (another failure, or no answer: the write may have been applied or not), deleted (the kubelet deleted it), " +
			"offline (a get while neither the hub nor kube-apiserver answered), unreadable (an answer that was not the node's Lease as expected).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	offlineSince = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "offline_since_seconds",
		Help:           "Unix time when the node went offline (neither the hub nor kube-apiserver reachable), 0 while it is not.",
		StabilityLevel: metrics.ALPHA,
	})
	observedChanges = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "copy_observed_changes_total",
		Help: "Changes of the copy of the node's view taken from what the kubelet was served by another way than the copy (kube-apiserver while the hub was away, " +
			"a hub channel or bulk get): a state newer than the copy's, or a deletion, so that the copy never answers older than what the node was served.",
		StabilityLevel: metrics.ALPHA,
	})
	observedOutside = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "copy_observed_outside_view_total",
		Help: "States the kubelet was served by another way than the copy and the copy did not take in, because the node's view does not carry them though the node may read them: " +
			"services of namespaces where the node has no pod (docs/api.md, \"The node view\").",
		StabilityLevel: metrics.ALPHA,
	})
	unobserved = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "copy_unobserved_total",
		Help: "Answers the kubelet was served of its node's view that the copy could not take in, by reason: undecodable, too_large, refused (an object outside the node's view). " +
			"Each leaves the copy unvouched (nodeproxy_node_copy_vouched 0) until the hub brings it past that moment.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	copyVouched = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "copy_vouched",
		Help: "1 while the copy of the node's view could be served offline: it holds a whole view, took in everything the node was served of it, and is younger than --offline-max-age. " +
			"0 otherwise: offline, the kubelet's reads of the view would be served nothing. Updated every 5 s.",
		StabilityLevel: metrics.ALPHA,
	})
	copyRefusals = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "copy_refusals_total",
		Help: "Reads of the kubelet the copy did not answer offline, by reason: no_view (it holds none), too_old (older than --offline-max-age), " +
			"unvouched (it may lack what the node was served). The read went to kube-apiserver and failed, as without the endpoint.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	copyWrites = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "copy_objects_written_total",
		Help: "Objects of the copy written to the kubelet (a get, a list's items, a watch's events), by encoding: passed_through (the copy's bytes as the hub sent them, " +
			"in the encoding the kubelet asked for: protobuf from today's hub) or transcoded (decoded and encoded again: a JSON client of a protobuf copy, " +
			"a protobuf client of what the copy keeps as JSON).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"encoding"})
)

// copyWritten is the copy writes counter of an object passed through or
// not.
func copyWritten(transcoded bool) metrics.CounterMetric {
	if transcoded {
		return copyWrites.WithLabelValues("transcoded")
	}
	return copyWrites.WithLabelValues("passed_through")
}
