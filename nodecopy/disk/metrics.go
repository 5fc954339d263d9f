package disk

import (
	"errors"
	"sync"
	"syscall"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	saves = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node_copy", Name: "saves_total",
		Help: "Saves of the node view's copy, by result: ok; no_space (the file system is full); error (any other failure). " +
			"On either failure the previous copy stays as it was.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	saveDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "nodeproxy", Subsystem: "node_copy", Name: "save_duration_seconds",
		Help: "Time taken by one save of the copy, waiting for an earlier save and the fsyncs included.",
		// 1 ms .. 16 s: on tmpfs a save is about the encoding alone, a
		// millisecond or two for 100 objects (BenchmarkSave; figures in
		// docs/operations.md, "Secrets at rest on the node"); on a disk
		// the two fsyncs add from a few ms on an SSD to seconds on a busy
		// network volume.
		Buckets:        metrics.ExponentialBuckets(0.001, 4, 8),
		StabilityLevel: metrics.ALPHA,
	})
	lastSaveBytes = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "nodeproxy", Subsystem: "node_copy", Name: "last_save_bytes",
		Help:           "Size of the copy's file as last saved.",
		StabilityLevel: metrics.ALPHA,
	})
	loads = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node_copy", Name: "loads_total",
		Help: "Loads of the node view's copy, by result: ok; none (no copy); corrupt (truncated or damaged); " +
			"newer_format; other_node; other_cluster; undecryptable (no key, another key, or a key given and the copy not encrypted); " +
			"error (the file could not be read). Any result but ok starts the view afresh from the hub.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	registerOnce sync.Once
)

// RegisterMetrics registers the copy's metrics with the legacy registry
// the endpoint serves on /metrics.
func RegisterMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(saves, saveDuration, lastSaveBytes, loads) })
}

func saveResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, syscall.ENOSPC):
		return "no_space"
	default:
		return "error"
	}
}

func loadResult(snap *Snapshot, err error) string {
	switch {
	case err == nil && snap == nil:
		return "none"
	case err == nil:
		return "ok"
	case errors.Is(err, ErrCorrupt):
		return "corrupt"
	case errors.Is(err, ErrVersion):
		return "newer_format"
	case errors.Is(err, ErrOtherNode):
		return "other_node"
	case errors.Is(err, ErrOtherCluster):
		return "other_cluster"
	case errors.Is(err, ErrUndecryptable):
		return "undecryptable"
	default:
		return "error"
	}
}
