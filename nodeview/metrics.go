package nodeview

import (
	"sync"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// How a view opened (nodeproxy_nodeview_opens_total).
const (
	openInitial  = "initial"  // its initial state sent
	openResumed  = "resumed"  // from a position, the changes since sent
	openExpired  = "expired"  // from a position older than the change logs: ERROR 410
	openReplaced = "replaced" // from a position older than the change logs: the view afresh, to replace the consumer's
	openRefused  = "refused"  // another node's view, or a position the cache did not reach in time
)

// How a resumed view's type was settled (nodeproxy_nodeview_resume_settles_total).
const (
	settleCaughtUp  = "caught_up"
	settleUnchanged = "unchanged"
	settleTooLarge  = "too_large"
	settleGone      = "gone"
)

// How a progress request ended (nodeproxy_nodeview_progress_requests_total).
const (
	progressAnswered = "answered" // a bookmark carried its token
	progressCovered  = "covered"  // a bookmark carried a later token of the same view, which answers it too
	progressClosed   = "closed"   // the view closed first
	progressRefused  = "refused"  // not shown as fresh as kube-apiserver in time: no answer (progressRefusals says why)
)

var (
	openViews = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "nodeview",
		Name:           "views",
		Help:           "Open node views: one per node endpoint that follows its node's view.",
		StabilityLevel: metrics.ALPHA,
	})
	heldObjects = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "nodeview",
		Name:           "objects",
		Help:           "Objects in the open node views, summed over views: each node's pods, Node and what the graph lets it reach; the cluster-wide types every view carries (services, runtime classes, CSI drivers) are not counted.",
		StabilityLevel: metrics.ALPHA,
	})
	viewObjects = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "nodeproxy",
		Subsystem: "nodeview",
		Name:      "view_objects",
		Help:      "Objects of its own (as nodeproxy_nodeview_objects counts them) a node view held when it opened or resumed.",
		// A node at the default 110 pods with a few references each
		// holds a few hundred objects.
		Buckets:        []float64{1, 10, 50, 100, 250, 500, 1000, 2500, 5000},
		StabilityLevel: metrics.ALPHA,
	})
	events = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "nodeview",
		Name:           "events_total",
		Help:           "Events sent on node views, by type: ADDED, MODIFIED, DELETED, ENTERED, LEFT (bookmarks are not counted).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"type"})
	opens = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "nodeview",
		Name:           "opens_total",
		Help:           "Node view requests, by how they went: initial (the initial state sent), resumed (from a position), expired (a position older than the change logs: ERROR 410), refused (another node's view, or 504 for a position the cache did not reach in 3 s).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"how"})
	settles = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "nodeview",
		Name:           "resume_settles_total",
		Help:           "Types of a resumed view this replica could not read at the view's position at once, by resource and how it was settled: caught_up (the cache reached the position within 3 s), unchanged (kube-apiserver showed the type did not change between the position and a version the cache can read), too_large (504 after 3 s), gone (the request ended first).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "how"})
	heldTooLong = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "nodeview",
		Name:           "pods_sent_without_references_total",
		Help:           "Pod changes held back for an object the pod uses that this replica's cache did not have yet, then sent without it after 2 s: the object was created after the pod, or its type's watch lagged that long.",
		StabilityLevel: metrics.ALPHA,
	})
	withheld = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "nodeview",
		Name:           "withheld_total",
		Help:           "Objects a view would have sent that the live graph no longer let its node reach (the change taking them away was not yet in the cache): not sent, or sent as LEFT.",
		StabilityLevel: metrics.ALPHA,
	})
	progressRequests = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "nodeview",
		Name:           "progress_requests_total",
		Help:           "Progress requests of node views, by how they ended: answered (a bookmark carried the request's token), covered (a bookmark carried a later token of the same view, which answers every request before it), closed (the view closed first), refused (not shown as fresh as kube-apiserver in time: not answered; nodeproxy_nodeview_progress_refusals_total says why).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	progressRefusals = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "nodeview",
		Name:           "progress_refusals_total",
		Help:           "Types that kept a node view's progress request from being answered, by resource and reason: stale (the cache of the type was not shown as fresh as kube-apiserver within 4 s: its watch behind or stuck), unavailable (kube-apiserver could not be asked its resourceVersion), unsynced (the type not listed yet). The node endpoint then reads elsewhere.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "reason"})
	progressProofs = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "nodeview",
		Name:           "progress_proofs_total",
		Help:           "Types of a node view's progress request shown fresh by asking kube-apiserver (its resourceVersion, a probe), by resource: their watch was failing, or had not heard from kube-apiserver within --node-view-heard-within. The others are answered at the cache's versions.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	encodedObjects = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "nodeview",
		Name:           "encoded_objects_total",
		Help:           "Objects node views sent, by the encoding their client asked for: protobuf (the node endpoint's; a pod goes as the cache keeps it, not encoded) or json (an older endpoint's, or another client's). LEFT and BOOKMARK events are JSON on either and not counted.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"encoding"})
	indexEntries = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "nodeview",
		Name:           "index_entries",
		Help:           "Objects of the graph's kinds (and namespaces) that at least one open node view reaches or holds: the entries of the index that routes their changes to the views, each with the reach of the one view that has it or a map of several.",
		StabilityLevel: metrics.ALPHA,
	})
	indexRebuilds = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "nodeview",
		Name:           "index_rebuilds_total",
		Help:           "Times the index of what node views reach was copied to a smaller map, three quarters of the entries it held at its largest gone (views closed, pods gone): a Go map keeps the memory of entries deleted from it.",
		StabilityLevel: metrics.ALPHA,
	})
	podReads = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "nodeproxy",
		Subsystem:      "nodeview",
		Name:           "pod_reads_total",
		Help:           "Pod versions node views took in, by how their references were known: decoded (the cache's bytes decoded, once a step however many readers), same_spec (the version shares its spec's bytes with the version the view or the cache had before, a kubelet's status write: nothing decoded).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"how"})

	// encodedCounters and podReadCounters are looked up once, by
	// encode's index and by whether the spec was the same.
	encodedCounters [2]metrics.CounterMetric
	podReadCounters [2]metrics.CounterMetric

	// eventCounters are looked up once: a step may send thousands.
	eventCounters = map[watch.EventType]metrics.CounterMetric{}

	registerOnce sync.Once
)

// RegisterMetrics registers the node view's metrics with the legacy
// registry that k8s.io/apiserver serves on /metrics.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(openViews, heldObjects, viewObjects, events, opens, settles, heldTooLong, withheld, progressRequests, progressRefusals, progressProofs, encodedObjects, podReads, indexEntries, indexRebuilds)
		for i, name := range encodingNames {
			encodedCounters[i] = encodedObjects.WithLabelValues(name)
		}
		podReadCounters = [2]metrics.CounterMetric{podReads.WithLabelValues("decoded"), podReads.WithLabelValues("same_spec")}
		for _, t := range []watch.EventType{watch.Added, watch.Modified, watch.Deleted, v1alpha1.NodeViewEntered, v1alpha1.NodeViewLeft} {
			eventCounters[t] = events.WithLabelValues(string(t))
		}
	})
}

func countEvent(t watch.EventType) {
	if c, ok := eventCounters[t]; ok {
		c.Inc()
	}
}

func countEncoded(enc int) {
	if c := encodedCounters[enc]; c != nil {
		c.Inc()
	}
}

func countPodRead(sameSpec bool) {
	i := 0
	if sameSpec {
		i = 1
	}
	if c := podReadCounters[i]; c != nil {
		c.Inc()
	}
}
