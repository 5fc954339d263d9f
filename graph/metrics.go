package graph

import (
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	writeDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "graph",
		Name:           "write_duration_seconds",
		Help:           "Time taken by one graph write, lock wait included, by operation.",
		Buckets:        metrics.ExponentialBuckets(1e-6, 4, 10), // 1us .. 262ms
		StabilityLevel: metrics.ALPHA,
	}, []string{"operation"})

	objects = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "graph",
		Name:           "objects",
		Help:           "Objects in the authorization graph, by kind.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})

	// sharedObjects and sharedNodes size the shared sets: memory is about
	// 4 bytes a node in the sorted form and at most 8 in the bitmap form.
	sharedObjects = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "graph",
		Name:           "shared_objects",
		Help:           "Objects that more than one node reaches, by the form of their set of nodes (sorted, bitmap).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"form"})

	sharedNodes = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "graph",
		Name:           "shared_object_nodes",
		Help:           "Nodes in the sets of objects that more than one node reaches, summed over those objects.",
		StabilityLevel: metrics.ALPHA,
	})

	registerOnce sync.Once
)

// RegisterMetrics registers the graph's metrics with the legacy registry
// that /metrics serves.
func RegisterMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(writeDuration, objects, sharedObjects, sharedNodes) })
}

func observeWrite(op string) func() {
	start := time.Now()
	return func() { writeDuration.WithLabelValues(op).Observe(time.Since(start).Seconds()) }
}
