package get

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

	registerOnce sync.Once
)

// RegisterMetrics registers the bulk get's metrics with the legacy
// registry that k8s.io/apiserver serves on /metrics. The metrics it
// shares with the bulk watch are bulk.RegisterMetrics'.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(requests, operations)
	})
}

func observeRequest(outcome string) { requests.WithLabelValues(outcome).Inc() }
