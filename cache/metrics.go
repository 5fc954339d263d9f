package cache

import (
	"sync"

	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	informerEvents = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "informer",
		Name:           "events_total",
		Help:           "Events delivered by the shared informers, by resource and type (add, update, delete).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "type"})

	informerObjects = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "informer",
		Name:           "objects",
		Help:           "Objects held by the shared informers, by resource.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})

	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(informerEvents, informerObjects)
	})
}

// countingHandler counts the events of one resource's informer. Counting
// in a handler instead of listing the store at scrape time keeps a scrape
// O(1) however many objects the cache holds.
func countingHandler(resource string) toolscache.ResourceEventHandler {
	registerMetrics()
	adds := informerEvents.WithLabelValues(resource, "add")
	updates := informerEvents.WithLabelValues(resource, "update")
	deletes := informerEvents.WithLabelValues(resource, "delete")
	objects := informerObjects.WithLabelValues(resource)
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(interface{}) { adds.Inc(); objects.Inc() },
		UpdateFunc: func(_, _ interface{}) { updates.Inc() },
		DeleteFunc: func(interface{}) { deletes.Inc(); objects.Dec() },
	}
}
