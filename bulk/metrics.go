package bulk

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
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

	registerOnce sync.Once
)

// RegisterMetrics registers the bulk API's metrics with the legacy
// registry that k8s.io/apiserver serves on /metrics.
func RegisterMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(requests, operations, decisions, reauthorizations) })
}

func observeRequest(outcome string) { requests.WithLabelValues(outcome).Inc() }

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
