package cache

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	cacheEvents = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "cache",
		Name:           "events_total",
		Help:           "Changes taken into the cache from kube-apiserver's watches, by resource and type (ADDED, MODIFIED, DELETED).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "type"})

	cacheWriteDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: "nodeproxy",
		Subsystem: "cache",
		Name:      "write_duration_seconds",
		Help:      "Time to take one change into the cache, graph update included, by resource.",
		// 1 µs to ~4 ms: a change costs a few microseconds; anything in
		// the last buckets means the writer is starved.
		Buckets:        metrics.ExponentialBuckets(1e-6, 4, 8),
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})

	cacheObjects = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "cache",
		Name:           "objects",
		Help:           "Objects held in the cache, by resource.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})

	cacheRelists = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "cache",
		Name:           "relists_total",
		Help:           "Full lists taken in, by resource; each one restarts the change log, so watches from before it are told to relist.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})

	encodedLookups = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "cache",
		Name:           "encoded_lookups_total",
		Help:           "Lookups of an object version's encoded bytes, by result: hit, or miss (the object was serialized).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	encodedEntries = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "cache",
		Name:           "encoded_entries",
		Help:           "Encoded object versions held by the encoded-bytes cache.",
		StabilityLevel: metrics.ALPHA,
	})

	registerOnce sync.Once
)

// RegisterMetrics registers the cache's metrics with the legacy registry
// that k8s.io/apiserver serves on /metrics.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(cacheEvents, cacheWriteDuration, cacheObjects, cacheRelists, encodedLookups, encodedEntries)
	})
}

// storeMetrics are one store's series, looked up once: the write path
// must not hash label values per change.
type storeMetrics struct {
	added, modified, deleted metrics.CounterMetric
	writes                   metrics.ObserverMetric
	objects                  metrics.GaugeMetric
	relists                  metrics.CounterMetric
}

func newStoreMetrics(resource string) storeMetrics {
	return storeMetrics{
		added:    cacheEvents.WithLabelValues(resource, string(watch.Added)),
		modified: cacheEvents.WithLabelValues(resource, string(watch.Modified)),
		deleted:  cacheEvents.WithLabelValues(resource, string(watch.Deleted)),
		writes:   cacheWriteDuration.WithLabelValues(resource),
		objects:  cacheObjects.WithLabelValues(resource),
		relists:  cacheRelists.WithLabelValues(resource),
	}
}

func (m storeMetrics) observeWrite(t watch.EventType, start time.Time) {
	switch t {
	case watch.Added:
		m.added.Inc()
	case watch.Modified:
		m.modified.Inc()
	case watch.Deleted:
		m.deleted.Inc()
	}
	m.writes.Observe(time.Since(start).Seconds())
}
