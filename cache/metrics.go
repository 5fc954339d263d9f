package cache

import (
	"sync"
	"sync/atomic"
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
		Help:           "Full lists taken in, by resource. A relist not counted in relists_carried_over_total restarted the change log, so watches from before it were told to relist.",
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

	objectDecodes = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "cache",
		Name:           "object_decodes_total",
		Help:           "Object versions decoded from the bytes the cache keeps them as, by kind: for the graph's handlers (the version before a change), for JSON encoding, for node views.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})

	listedAsBytes = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "cache",
		Name:           "listed_as_bytes_total",
		Help:           "Objects of a type kept as bytes that were taken in as bytes the moment a watch-list's initial state brought them, by resource, rather than held decoded until the whole list had come.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	bytesFallbacks = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "cache",
		Name:           "bytes_fallbacks_total",
		Help:           "Objects of a type kept as bytes that were not, by resource and what failed: encode (the object was kept decoded), decode (the graph's handlers got the previous version's key fields alone).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "failed"})

	cacheRelistsCarriedOver = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "cache",
		Name:           "relists_carried_over_total",
		Help:           "Relists whose difference to the cache's state was appended to the change log as events, by resource: watches from before them carried on, nobody had to relist.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})

	cacheRelistLogRestarts = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy",
		Subsystem: "cache",
		Name:      "relist_log_restarts_total",
		Help: "Relists (after the first list) that started the change log over, so that every watch from before them was told to relist, by resource and reason: " +
			"option (--cache-relist-expires-watches), list_older (the list is older than the cache), version_outside (a listed object changed at a version outside the relist's span), " +
			"version_shared (two listed objects at one version), no_room (more changes than versions, and no version inside the span for them to share).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "reason"})

	cacheRelistDeletions = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy",
		Subsystem: "cache",
		Name:      "relist_deletions_total",
		Help: "DELETED events a relist carried on put into the change log, by resource, cause (gone: the list lacks the object; reused: its name has a new UID, and an ADDED follows) " +
			"and version (own: a version no other event holds; shared: the relist's first version, shared with others, where the versions did not suffice).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "cause", "version"})

	watchFailures = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy",
		Subsystem: "cache",
		Name:      "watch_failures_total",
		Help: "Failed lists and watches of kube-apiserver, by resource, request (list, watch) and reason " +
			"(unreachable, throttled: 429, expired: 410, the usual first answer of a restarted kube-apiserver, error: anything else).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "request", "reason"})

	stalenessDesc = metrics.NewDesc("nodeproxy_cache_staleness_seconds",
		"Seconds since kube-apiserver last told the cache anything of this resource: an event, a bookmark or a list. "+
			"A healthy watch hears a bookmark about every minute, so a quiet resource reaches about 60; much more means its watch is stuck.",
		[]string{"resource"}, nil, metrics.ALPHA, "")
	outageDesc = metrics.NewDesc("nodeproxy_cache_watch_outage_seconds",
		"Seconds this resource's lists and watches of kube-apiserver have been failing with no success since; 0 while they succeed. "+
			"/readyz's cache-watch check fails once one passes --cache-max-watch-outage.",
		[]string{"resource"}, nil, metrics.ALPHA, "")

	shardRangesHeld = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "cache",
		Name:           "shard_ranges_held",
		Help:           "Ranges of nodes (of 4096) whose objects a sharded replica holds, by resource; per-node types only, absent for an unsharded replica.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})

	shardFiltered = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy",
		Subsystem: "cache",
		Name:      "shard_filtered_total",
		Help: "Objects of per-node types a sharded replica did not take in as they came, by resource and reason: unbound (a pod bound to no node), " +
			"out_of_shard (its node's range is not held), pending (buffered while its range is acquired), before_held (a change its range's acquisition list already showed).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "reason"})

	shardAcquisitions = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "cache",
		Name:           "shard_acquisitions_total",
		Help:           "Acquisitions of ranges by Hold (a list of the type, then the buffered changes), by resource and result (ok, error: the ranges stay unheld and Hold is called again).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "result"})

	shardAcquisitionDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: "nodeproxy",
		Subsystem: "cache",
		Name:      "shard_acquisition_duration_seconds",
		Help:      "Time to acquire ranges of one resource: the list of the type from kube-apiserver and taking in its held part.",
		// 10 ms to ~160 s: a list of a large cluster's pods takes seconds.
		Buckets:        metrics.ExponentialBuckets(0.01, 4, 8),
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})

	shardDropped = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "cache",
		Name:           "shard_dropped_total",
		Help:           "Objects a sharded replica let go of because Hold dropped their node's range, by resource (no change-log event: nobody here serves those nodes).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})

	registerOnce sync.Once
)

// RegisterMetrics registers the cache's metrics with the legacy registry
// that k8s.io/apiserver serves on /metrics.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(cacheEvents, cacheWriteDuration, cacheObjects, cacheRelists, encodedLookups, encodedEntries, objectDecodes, listedAsBytes, bytesFallbacks, watchFailures, cacheRelistsCarriedOver, cacheRelistLogRestarts, cacheRelistDeletions,
			shardRangesHeld, shardFiltered, shardAcquisitions, shardAcquisitionDuration, shardDropped)
		legacyregistry.CustomMustRegister(&freshnessCollector{})
	})
}

// reported is the cache /metrics describes the freshness of: the one
// started last (a hub runs one).
var reported atomic.Pointer[Cache]

// freshnessCollector reports each store's staleness and outage as of the
// scrape, so that the write path pays nothing for them.
type freshnessCollector struct {
	metrics.BaseStableCollector
}

func (*freshnessCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- stalenessDesc
	ch <- outageDesc
}

func (*freshnessCollector) CollectWithStability(ch chan<- metrics.Metric) {
	c := reported.Load()
	if c == nil {
		return
	}
	for _, f := range c.Freshness() {
		if f.Heard {
			ch <- metrics.NewLazyConstMetric(stalenessDesc, metrics.GaugeValue, f.SinceHeard.Seconds(), f.Resource)
		}
		ch <- metrics.NewLazyConstMetric(outageDesc, metrics.GaugeValue, f.Outage.Seconds(), f.Resource)
	}
}

// failureMetrics are one reflector's failure series, by request and
// reason, looked up once.
type failureMetrics map[[2]string]metrics.CounterMetric

func newFailureMetrics(resource string) failureMetrics {
	m := failureMetrics{}
	for _, request := range []string{requestList, requestWatch} {
		for _, reason := range []string{"unreachable", "throttled", "expired", "error"} {
			m[[2]string{request, reason}] = watchFailures.WithLabelValues(resource, request, reason)
		}
	}
	return m
}

func (m failureMetrics) inc(request, reason string) { m[[2]string{request, reason}].Inc() }

// storeMetrics are one store's series, looked up once: the write path
// must not hash label values per change.
type storeMetrics struct {
	added, modified, deleted metrics.CounterMetric
	writes                   metrics.ObserverMetric
	objects                  metrics.GaugeMetric
	relists                  metrics.CounterMetric
	carriedOver              metrics.CounterMetric
	// logRestarts is by reason, looked up on the rare relist that
	// restarts the log.
	logRestarts *metrics.CounterVec
	// deletions are by cause (gone, reused) and version (own, shared).
	deletions [2][2]metrics.CounterMetric
	// Sharding (held.go, hold.go).
	filtered     [len(verdictNames)]metrics.CounterMetric
	acquiredOK   metrics.CounterMetric
	acquireError metrics.CounterMetric
	acquisition  metrics.ObserverMetric
	dropped      metrics.CounterMetric
}

func newStoreMetrics(resource string) storeMetrics {
	m := storeMetrics{
		added:       cacheEvents.WithLabelValues(resource, string(watch.Added)),
		modified:    cacheEvents.WithLabelValues(resource, string(watch.Modified)),
		deleted:     cacheEvents.WithLabelValues(resource, string(watch.Deleted)),
		writes:      cacheWriteDuration.WithLabelValues(resource),
		objects:     cacheObjects.WithLabelValues(resource),
		relists:     cacheRelists.WithLabelValues(resource),
		carriedOver: cacheRelistsCarriedOver.WithLabelValues(resource),
		logRestarts: cacheRelistLogRestarts,
		deletions: [2][2]metrics.CounterMetric{
			{cacheRelistDeletions.WithLabelValues(resource, "gone", "own"), cacheRelistDeletions.WithLabelValues(resource, "gone", "shared")},
			{cacheRelistDeletions.WithLabelValues(resource, "reused", "own"), cacheRelistDeletions.WithLabelValues(resource, "reused", "shared")},
		},
		acquiredOK:   shardAcquisitions.WithLabelValues(resource, "ok"),
		acquireError: shardAcquisitions.WithLabelValues(resource, "error"),
		acquisition:  shardAcquisitionDuration.WithLabelValues(resource),
		dropped:      shardDropped.WithLabelValues(resource),
	}
	for v, name := range verdictNames {
		if verdict(v) != admit {
			m.filtered[v] = shardFiltered.WithLabelValues(resource, name)
		}
	}
	return m
}

// observeRelistDeletions counts the DELETED events of a relist carried on.
func (m storeMetrics) observeRelistDeletions(r relist) {
	for cause, byVersion := range r.deletions {
		for version, n := range byVersion {
			m.deletions[cause][version].Add(float64(n))
		}
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
