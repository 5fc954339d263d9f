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

	reopenOK           = "ok"
	reopenFailed       = "failed"
	reopenNotResumable = "not_resumable"
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

	reopens = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy",
		Subsystem: "passthrough",
		Name:      "watch_reopens_total",
		Help: "Watches on kube-apiserver of uncached channels that ended without an error (kube-apiserver's timeout, " +
			"a dropped connection), by what followed: ok (re-opened from the last resourceVersion relayed); failed (the " +
			"channel ended with an ERROR: kube-apiserver refused or could not be reached); not_resumable (the watch " +
			"ended before its initial state was known to be complete: the channel ended with 410).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

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
		legacyregistry.MustRegister(operations, openChannels, reopens, discoveryFetches)
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
