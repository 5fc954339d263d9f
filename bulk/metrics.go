package bulk

import (
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/nodeproxy/nodeproxy/cache"
)

// Outcomes of a bulk get request.
const (
	outcomeOK        = "ok"
	outcomeInvalid   = "invalid"
	outcomeForbidden = "forbidden"
	outcomeError     = "error"
	// outcomeTooLarge: the answer would pass --bulk-get-max-answer-bytes (413).
	outcomeTooLarge = "too_large"
	// outcomeTooManyInFlight: the caller had --bulk-get-max-in-flight-per-user
	// requests in flight (429).
	outcomeTooManyInFlight = "too_many_in_flight"
)

var (
	requests = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "bulk_get",
		Name:           "requests_total",
		Help:           "Bulk get requests, by outcome: ok, invalid (422), forbidden (403), error (anything else, e.g. 410 Expired), too_large (413: the answer would pass --bulk-get-max-answer-bytes), too_many_in_flight (429: the caller had --bulk-get-max-in-flight-per-user requests in flight).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"outcome"})

	operations = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "bulk_get",
		Name:           "operations_total",
		Help:           "Operations answered by successful bulk gets, by resource.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})

	reauthorizations = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "bulk_watch",
		Name:           "reauthorizations_total",
		Help:           "Open channels of users other than nodes authorized again, by result: allowed, denied (the channel was closed with 403), error (kept until the next round).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
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
	resumes = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "bulk_watch",
		Name:           "resumes_total",
		Help:           "Channels opened from a resourceVersion without initial events, by resource and how they joined: log (the change log from that version, or ahead of the cache from a version kube-apiserver vouched for), current_state (older than the log, naming one object: its current state as one event at most), expired (older than the log: ERROR 410), gone (closed first).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "how"})

	registerOnce sync.Once
)

// RegisterMetrics registers the bulk API's metrics with the legacy
// registry that k8s.io/apiserver serves on /metrics.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(requests, operations, decisions, reauthorizations, versionWaits, latestVersionRequests, latestVersionDuration, resumes)
	})
}

func observeRequest(outcome string) { requests.WithLabelValues(outcome).Inc() }

func observeVersionWait(s *cache.Store, request, result string) {
	versionWaits.WithLabelValues(s.Resource.Resource, request, result).Inc()
}

func observeResume(s *cache.Store, how string) {
	resumes.WithLabelValues(s.Resource.Resource, how).Inc()
}

func observeLatestVersionRequest(resource string, err error, took time.Duration) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	latestVersionRequests.WithLabelValues(resource, result).Inc()
	latestVersionDuration.WithLabelValues(resource).Observe(took.Seconds())
}

// typeSeries are one resource type's per-operation series, looked up once
// per type: a request of 100 operations should not hash label values 200
// times.
type typeSeries struct {
	operations, allowed, denied metrics.CounterMetric
}

func newTypeSeries(resource string) *typeSeries {
	RegisterMetrics() // before WithLabelValues, which is a no-op until then
	return &typeSeries{
		operations: operations.WithLabelValues(resource),
		allowed:    decisions.WithLabelValues(resource, "allow"),
		denied:     decisions.WithLabelValues(resource, "deny"),
	}
}

func (s *typeSeries) decision(allowed bool) {
	if allowed {
		s.allowed.Inc()
	} else {
		s.denied.Inc()
	}
}
