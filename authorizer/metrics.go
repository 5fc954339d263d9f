package authorizer

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	decisions = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "authorizer",
		Name:           "decisions_total",
		Help:           "SubjectAccessReviews answered, by resource (other for resources nodes have no special rule for) and decision (allow, no_opinion).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "decision"})

	decisionDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: "nodeproxy",
		Subsystem: "authorizer",
		Name:      "decision_duration_seconds",
		Help:      "Time to decide one SubjectAccessReview, decoding and encoding excluded.",
		// 100ns .. 1.6ms: a decision is a few hundred nanoseconds; the
		// upper buckets exist to show when it is not.
		Buckets:        metrics.ExponentialBuckets(1e-7, 4, 8),
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})

	rejectedReviews = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "authorizer",
		Name:           "rejected_reviews_total",
		Help:           "Webhook requests refused as malformed, by reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})

	refreshedDecisions = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy",
		Subsystem: "authorizer",
		Name:      "refreshed_decisions_total",
		Help: "Node refusals decided again after bringing the graph up to kube-apiserver's view of the node's pods, by result: " +
			"allowed (the graph was behind: a graph-lag denial avoided), refused (still refused), error (could not refresh; refused).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	refreshWait = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "nodeproxy",
		Subsystem: "authorizer",
		Name:      "refresh_wait_seconds",
		Help:      "Time a node refusal waited for the graph to be brought up to date: what the refusal path adds.",
		// 1ms .. 4s: a list of one node's pods and a store that keeps up
		// take milliseconds; RefreshOptions.Timeout (2 s) is the ceiling.
		Buckets:        metrics.ExponentialBuckets(1e-3, 2, 13),
		StabilityLevel: metrics.ALPHA,
	})

	refreshRounds = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy",
		Subsystem: "authorizer",
		Name:      "refresh_rounds_total",
		Help: "Rounds bringing the graph up to date with one node's pods, each one list from kube-apiserver shared by every refusal of that node waiting for it, " +
			"by result: ok, timeout, throttled (no list sent: too many in flight across nodes), error.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	routedReviews = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy",
		Subsystem: "authorizer",
		Name:      "routed_reviews_total",
		Help: "SubjectAccessReviews answered by a replica with a Shards table, by path: local (this replica holds the node, or the answer does not depend on the node's pods), " +
			"owner and secondary (forwarded to the replica that owns the node, or holds it warm, and answered there), consistent_list (decided from kube-apiserver's consistent list of the node's pods).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"path"})

	routedDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: "nodeproxy",
		Subsystem: "authorizer",
		Name:      "routed_duration_seconds",
		Help: "Time to answer a SubjectAccessReview about a node this replica does not hold, by the path that answered (owner, secondary, consistent_list), " +
			"failed peers included: what sharding adds to kube-apiserver's wait. Local decisions are in decision_duration_seconds.",
		// 100us .. 3.3s: a forward on a healthy network is a fraction of
		// a millisecond; peers' deadlines (750 ms each) and the
		// consistent list (1 s) make up the webhook's 3 s.
		Buckets:        metrics.ExponentialBuckets(1e-4, 2, 16),
		StabilityLevel: metrics.ALPHA,
	}, []string{"path"})

	peerFailures = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy",
		Subsystem: "authorizer",
		Name:      "peer_failures_total",
		Help: "Forwarded SubjectAccessReviews a replica holding the node did not answer, by peer (owner, secondary) and reason " +
			"(unreachable, timeout, status: an error status such as 401, 403 or 503, malformed).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"peer", "reason"})

	consistentDecisions = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy",
		Subsystem: "authorizer",
		Name:      "consistent_decisions_total",
		Help: "Node requests decided from kube-apiserver's consistent reads because no replica holding the node answered, by result: " +
			"allowed, refused, error (no opinion), throttled (no opinion: too many in flight).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	registerOnce sync.Once
)

// RegisterMetrics registers the authorizer's metrics with the legacy
// registry that /metrics serves.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(decisions, decisionDuration, rejectedReviews, refreshedDecisions, refreshWait, refreshRounds,
			routedReviews, routedDuration, peerFailures, consistentDecisions)
	})
}

// metricResource bounds the resource label to the resources the
// authorizer knows: a SubjectAccessReview may name any string.
func metricResource(resource string, isResource bool) string {
	if !isResource {
		return "nonresource"
	}
	switch resource {
	case "secrets", "configmaps", "persistentvolumeclaims", "persistentvolumes", "serviceaccounts",
		"nodes", "pods", "resourceclaims", "resourceslices", "volumeattachments", "csinodes", "leases",
		"podcertificaterequests":
		return resource
	}
	return "other"
}
