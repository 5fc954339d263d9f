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

	registerOnce sync.Once
)

// RegisterMetrics registers the graph's metrics with the legacy registry
// that /metrics serves.
func RegisterMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(writeDuration, objects) })
}

func observeWrite(op string) func() {
	start := time.Now()
	return func() { writeDuration.WithLabelValues(op).Observe(time.Since(start).Seconds()) }
}
