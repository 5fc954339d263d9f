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

	registerOnce sync.Once
)

// RegisterMetrics registers the authorizer's metrics with the legacy
// registry that /metrics serves.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(decisions, decisionDuration, rejectedReviews)
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
