package passthrough

import (
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

const (
	verbList  = "list"
	verbWatch = "watch"
)

var (
	operations = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy",
		Subsystem: "passthrough",
		Name:      "operations_total",
		Help: "Operations on uncached types sent to kube-apiserver as the caller, by verb (list: a bulk get operation; " +
			"watch: a bulk watch channel) and result (ok; refused: kube-apiserver answered 401 or 403, or the caller " +
			"could not be impersonated faithfully; error: anything else, e.g. 404, 410, kube-apiserver unreachable).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"verb", "result"})

	openChannels = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "passthrough",
		Name:           "channels",
		Help:           "Open bulk watch channels on uncached types: each is one watch on kube-apiserver.",
		StabilityLevel: metrics.ALPHA,
	})

	discoveryFetches = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy",
		Subsystem: "passthrough",
		Name:      "discovery_fetches_total",
		Help: "Group/version discovery requests made to resolve uncached types, by result (found; absent: " +
			"kube-apiserver does not serve the group/version; error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	registerOnce sync.Once
)

// RegisterMetrics registers the package's metrics with the legacy
// registry that /metrics serves.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(operations, openChannels, discoveryFetches)
	})
}

func observe(verb string, err error) {
	result := "ok"
	switch {
	case err == nil:
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		result = "refused"
	default:
		result = "error"
	}
	operations.WithLabelValues(verb, result).Inc()
}
