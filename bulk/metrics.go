package bulk

import (
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/nodeproxy/nodeproxy/cache"
)

// The metrics of what both requests share: authorization decisions and
// reads at a resourceVersion. The bulk get's are in bulk/get, the bulk
// watch's in bulk/watch.
var (
	// decisions keeps the bulk_get subsystem it was published with,
	// though watch channels are decided by the same code and counted
	// here too.
	decisions = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "bulk_get",
		Name:           "authorization_decisions_total",
		Help:           "Per-operation authorization decisions, by resource and decision (allow, deny).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "decision"})

	versionWaits = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "bulk",
		Name:           "version_waits_total",
		Help:           "Requests at a resourceVersion this replica's cache had not reached when they came (clients moved from another replica), by resource, request (read: a list or a channel's initial state; resume: a watch from the version) and result: caught_up (the cache reached it within 3 s), vouched (a resume kube-apiserver had reached the version for: it joined ahead of the cache), too_large (504 after 3 s: kube-apiserver had not reached it either, or, for a read, was not asked), unchecked (504 after 3 s: kube-apiserver could not be asked), gone (the request ended first).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "request", "result"})
	latestVersionRequests = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "bulk",
		Name:           "latest_version_requests_total",
		Help:           "Requests to kube-apiserver for its current resourceVersion of a type (a consistent metadata list of one item), made for resumes ahead of the cache, one at a time per type whatever the number waiting, by resource and result (ok, error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "result"})
	latestVersionDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "bulk",
		Name:           "latest_version_request_duration_seconds",
		Help:           "How long kube-apiserver took to tell its current resourceVersion of a type, by resource.",
		Buckets:        []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 3},
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})

	registerOnce sync.Once
)

// RegisterMetrics registers the shared metrics with the legacy registry
// that k8s.io/apiserver serves on /metrics. bulk/get and bulk/watch
// register their own.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(decisions, versionWaits, latestVersionRequests, latestVersionDuration)
	})
}

func observeVersionWait(s *cache.Store, request, result string) {
	versionWaits.WithLabelValues(s.Resource.Resource, request, result).Inc()
}

func observeLatestVersionRequest(resource string, err error, took time.Duration) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	latestVersionRequests.WithLabelValues(resource, result).Inc()
	latestVersionDuration.WithLabelValues(resource).Observe(took.Seconds())
}

// decisionSeries are one resource type's decision series.
type decisionSeries struct {
	allowed, denied metrics.CounterMetric
}

func newDecisionSeries(resource string) *decisionSeries {
	RegisterMetrics() // before WithLabelValues, which is a no-op until then
	return &decisionSeries{
		allowed: decisions.WithLabelValues(resource, "allow"),
		denied:  decisions.WithLabelValues(resource, "deny"),
	}
}

func (s *decisionSeries) observe(allowed bool) {
	if allowed {
		s.allowed.Inc()
	} else {
		s.denied.Inc()
	}
}
