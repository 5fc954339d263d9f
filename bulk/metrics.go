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
		Help:           "Requests at a resourceVersion this replica's cache had not reached when they came (clients moved from another replica), by resource, request (read: a list or a channel's initial state; resume: a watch from the version) and result: caught_up (the cache reached it within 3 s), vouched (a resume kube-apiserver had reached the version for: it joined ahead of the cache), too_large (504 after 3 s: kube-apiserver had not reached it either, or, for a read, was not asked), unchecked (504 after 3 s: kube-apiserver could not be asked), gone (the request ended first), unsynced (504 at once: the type's first list is not in the cache yet).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "request", "result"})
	latestVersionRequests = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "bulk",
		Name:           "latest_version_requests_total",
		Help:           "Requests to kube-apiserver for its current resourceVersion of a type (a consistent metadata list of one item), made for consistent reads and for resumes ahead of the cache, at most one every 200 ms per type (8 out at once) whatever the number waiting, by resource and result (ok, error).",
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

	consistentReads = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "bulk",
		Name:           "consistent_reads_total",
		Help:           "Reads with resourceVersion \"\" (bulk get operations, channels with sendInitialEvents), by resource and result: fresh (the cache had reached kube-apiserver's version), caught_up (it reached it within 8 s of the read), confirmed (a quiet type: a probe showed nothing of the type had changed since the cache's version), too_large (504 8 s after the read), unavailable (500 ServerTimeout: kube-apiserver could not be asked), gone (the request ended first), unsynced (504 at once: the type's first list is not in the cache yet).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "result"})
	consistentReadWait = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "bulk",
		Name:           "consistent_read_wait_seconds",
		Help:           "What a read with resourceVersion \"\" waited before it was answered or refused: kube-apiserver's answer, then the cache, by resource.",
		Buckets:        []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, .75, 1, 1.5, 2, 3, 4, 6},
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})

	progressProbes = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "bulk",
		Name:           "progress_probes_total",
		Help:           "Probes asking kube-apiserver whether a quiet type changed since the cache's resourceVersion (a watch from it until kube-apiserver's first bookmark, about 1 to 2 s), made for consistent reads, at most one every 300 ms per type (8 out at once) whatever the number waiting, by resource and result (ok, error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "result"})
	progressProbeDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "bulk",
		Name:           "progress_probe_duration_seconds",
		Help:           "How long a probe of a quiet type took, from the watch's request to kube-apiserver's bookmark, by resource.",
		Buckets:        []float64{.1, .25, .5, 1, 1.5, 2, 2.5, 3, 5},
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})

	registerOnce sync.Once
)

// RegisterMetrics registers the shared metrics with the legacy registry
// that k8s.io/apiserver serves on /metrics. bulk/get and bulk/watch
// register their own.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(decisions, versionWaits, latestVersionRequests, latestVersionDuration, consistentReads, consistentReadWait, progressProbes, progressProbeDuration)
	})
}

func observeVersionWait(s *cache.Store, request, result string) {
	versionWaits.WithLabelValues(s.Resource.Resource, request, result).Inc()
}

func observeConsistentRead(s *cache.Store, result string, waited time.Duration) {
	consistentReads.WithLabelValues(s.Resource.Resource, result).Inc()
	consistentReadWait.WithLabelValues(s.Resource.Resource).Observe(waited.Seconds())
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

func observeProgressProbe(resource string, err error, took time.Duration) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	progressProbes.WithLabelValues(resource, result).Inc()
	progressProbeDuration.WithLabelValues(resource).Observe(took.Seconds())
}
