package podapi

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	requests = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "podapi", Name: "requests_total",
		Help: "Requests of the Pod API, by operation (create, delete, list, get) and the HTTP code answered: " +
			"201 stored, 200 deleted or listed, 400 bad body, 403 caller not allowed, 404 no such pod, 409 name taken or handed over, 422 invalid pod.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"operation", "code"})
	fetches = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "podapi", Name: "kubelet_fetches_total",
		Help:           "The kubelet's fetches of its pod source (staticPodURL), by result: ok, unauthorized (no or a wrong bearer token).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	handovers = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "podapi", Name: "handover_steps_total",
		Help: "Handover decisions, by result: started (no longer served as a static pod), created (the API pod exists), " +
			"refused (kube-apiserver refused the pod; served locally, retried), unreachable (no kube-apiserver yet), " +
			"timeout (the kubelet did not let go of the static pod in time; served locally again), removed (the API pod was deleted in the API; the record goes).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	handoverSeconds = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "nodeproxy", Subsystem: "podapi", Name: "handover_duration_seconds",
		Help:           "From the moment a pod stops being served as a static pod to the creation of its API pod: the part of the restart at handover that the endpoint controls.",
		Buckets:        []float64{1, 2, 5, 10, 20, 30, 45, 60, 90, 120},
		StabilityLevel: metrics.ALPHA,
	})
	kubeletDecisions = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "podapi", Name: "kubelet_decisions_total",
		Help: "The watch of what the kubelet took from its pod source, by decision: checked (its PodResources list read), error (not read: no decision), " +
			"taken (a pod first seen on the kubelet), quarantined (a pod the kubelet refused with its list, taken out), " +
			"quarantined_on_suspicion (the same, while older pods of those lists were not taken either), released (a pod quarantined on suspicion served again).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"decision"})
	stored = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "nodeproxy", Subsystem: "podapi", Name: "pods",
		Help:           "Stored pods, by state (Local, HandingOver, HandedOver, HandoverFailed, Quarantined).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"state"})

	registerOnce sync.Once
)

// RegisterMetrics registers the Pod API's metrics with the legacy
// registry, which the node endpoint serves on /metrics.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(requests, fetches, handovers, handoverSeconds, kubeletDecisions, stored)
	})
}
