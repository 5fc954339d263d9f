package watch

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/nodeproxy/nodeproxy/cache"
)

var (
	reauthorizations = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "bulk_watch",
		Name:           "reauthorizations_total",
		Help:           "Open channels kube-apiserver decides (of users other than nodes, and of nodes on types the graph does not decide) authorized again, by result: allowed, denied (the channel was closed with 403), error (kept, and its user asked about again 10 s later).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	reauthorizationRounds = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "bulk_watch",
		Name:           "reauthorization_rounds_total",
		Help:           "Rounds of authorizing open channels again, by why they ran: rbac_change (an RBAC change named their users, or their check could not be made 10 s before; only those channels), periodic (--watch-reauthorize-interval; every channel), rbac_unwatched (RBAC's changes not yet watched; every channel, every minute).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	rbacWatched = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "bulk_watch",
		Name:           "rbac_watched",
		Help:           "1 once RBAC's changes are watched, and open channels are authorized again when one names their user; 0 until then (the hub's RBAC informers have not listed: every channel is authorized again every minute instead).",
		StabilityLevel: metrics.ALPHA,
	})
	resumes = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "bulk_watch",
		Name:           "resumes_total",
		Help:           "Channels opened from a resourceVersion without initial events, by resource and how they joined: log (the change log from that version, or ahead of the cache from a version kube-apiserver vouched for), current_state (older than the log, naming one object: its current state as one event at most), expired (older than the log: ERROR 410), gone (closed first).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "how"})

	registerOnce sync.Once
)

// RegisterMetrics registers the bulk watch's metrics with the legacy
// registry that k8s.io/apiserver serves on /metrics. The metrics it
// shares with the bulk get are bulk.RegisterMetrics'.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(reauthorizations, reauthorizationRounds, rbacWatched, resumes)
	})
}

func observeResume(s *cache.Store, how string) {
	resumes.WithLabelValues(s.Resource.Resource, how).Inc()
}
