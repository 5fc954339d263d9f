package endpoint

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/nodeproxy/nodeproxy/watchmux"
)

// Paths a request can take, the values of the "path" label.
const (
	pathHub       = "hub"
	pathAPIServer = "apiserver"
)

var (
	requests = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "requests_total",
		Help: "Requests of the local kubelet, by the path that answered them (copy: the copy of the node's view; memory: the endpoint's memory of the node's Lease; hub; apiserver), " +
			"the resource (empty for non-resource paths) and the verb.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"path", "resource", "verb"})
	watches = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "watches",
		Help:           "Open watches of the local kubelet, by the path that serves them (hub: a channel of the bulk watch; apiserver: proxied).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"path", "resource"})
	clientRequests = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "client_requests_total",
		Help: "Requests of the node's other clients (kube-proxy), each with its own credential, by the path that answered them (hub, apiserver), " +
			"the resource (empty for non-resource paths) and the verb.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"path", "resource", "verb"})
	clientWatches = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "client_watches",
		Help:           "Open watches of the node's other clients, by the path that serves them (hub: a channel of the client's own hub connection; apiserver: proxied).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"path", "resource"})
	fallbacks = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "hub_fallbacks_total",
		Help: "Reads the hub would serve that went to kube-apiserver instead, by reason: " +
			"down (no hub connection), not_found (a 404 on the hub's path, which the hub never answers: a wrong address, an old replica, a proxy), " +
			"error (the hub failed or refused the form of the request).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	hubEvents = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "hub_watch_events_total",
		Help: "Events of hub channels written to watches, bookmarks and errors aside, by how: passed_through (the object's bytes as the hub sent them, in the watch's media type), " +
			"reencoded (decoded and encoded again: a hub that sends only JSON to a protobuf watch).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"encoding"})
	hubConnected = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "hub_connected",
		Help: "1 while the bulk watch connection to the hub is up.", StabilityLevel: metrics.ALPHA,
	})
	hubDials = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "hub_dials_total",
		Help: "Bulk watch connections to the hub, by result: ok (each time one is up, the first and every one after a replica went), " +
			"error (failed dials before the first; later ones count in nodeproxy_watchmux_client_reconnects_total).", StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	returnsToHub = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "watches_returned_to_hub_total",
		Help:           "Proxied watches of hub-served types ended when the hub came back, so that the kubelet re-watches through the hub.",
		StabilityLevel: metrics.ALPHA,
	})
	refused = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "refused_requests_total",
		Help: "Requests refused before reaching anything, by reason: unauthenticated (neither a valid client certificate nor a bearer token on the kubelet port; no valid bearer token on the metrics port), " +
			"forbidden (not this node's identity; a scraper kube-apiserver does not allow to get /metrics), " +
			"throttled (a new token on the metrics port past the review rate, answered 429).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	readyProbes = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "ready_probes_total",
		Help: "Requests to kube-apiserver's /readyz that /readyz made while the hub connection was down, by result (ok, error); " +
			"at most one per 10 s, whatever the rate of /readyz calls.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	scrapeReviews = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "scraper_reviews_total",
		Help: "Bearer tokens on the metrics port reviewed with kube-apiserver (a TokenReview, and a SubjectAccessReview if it authenticates), " +
			"by result: allowed, refused (not authenticated or not allowed /metrics), error (kube-apiserver did not answer).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	clientConnections = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "client_hub_connections",
		Help:           "Open hub connections of the node's other clients (kube-proxy), one per bearer token, each carrying that client's own credential.",
		StabilityLevel: metrics.ALPHA,
	})
	clientDials = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "client_hub_dials_total",
		Help: "Hub connections dialed for the node's other clients, by result: ok; unauthorized (the hub refused the token: " +
			"kube-apiserver answers the client's reads, and words the 401); forbidden (the client may not use the bulk API); error (the hub unreachable); throttled (past the dial rate); " +
			"full (16 client connections, each with a request open). Whatever the result but ok, the reads go to kube-apiserver with the client's own credential.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	clientTokenChecks = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "client_token_checks_total",
		Help: "Questions to kube-apiserver (a SelfSubjectReview with the client's token) before a new read of another client of the node is served on its hub connection, by result: " +
			"accepted (the read is served by the hub), refused (401: the token's connection is closed and the read goes to kube-apiserver, which answers its 401), " +
			"error (no answer: the hub, which keeps checking the token, serves the read).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	clientEvictions = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "node", Name: "client_hub_evictions_total",
		Help: "Entries the table of the node's other clients let go, by reason: idle (a connection with no request for 5 minutes, closed); " +
			"room (a connection with no request open, closed for a new client's at the limit of 16); " +
			"failed (a token whose dial failed forgotten: unused for 5 minutes, pushed out by newer failures past 256, or the node's own hub connection back; one the hub refused is kept then); " +
			"unauthorized (a connection the hub closed because its token no longer authenticates, or whose token kube-apiserver refused at a new read, taken out at once; the token is dialed again only once kube-apiserver serves it a watch). " +
			"A failed dial never takes a connection's place.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})

	registerOnce sync.Once
)

// callerMetrics are the request metrics of one kind of caller.
type callerMetrics struct {
	requests *metrics.CounterVec
	watches  *metrics.GaugeVec
}

// relayed is the hub events counter of an event written re-encoded or not.
func relayed(reencoded bool) metrics.CounterMetric {
	if reencoded {
		return hubEvents.WithLabelValues("reencoded")
	}
	return hubEvents.WithLabelValues("passed_through")
}

func (who caller) metrics() callerMetrics {
	if who == client {
		return callerMetrics{clientRequests, clientWatches}
	}
	return callerMetrics{requests, watches}
}

// RegisterMetrics registers the endpoint's metrics with the legacy
// registry it serves on /metrics.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(requests, watches, fallbacks, hubEvents, hubConnected, hubDials, returnsToHub, refused, readyProbes, scrapeReviews,
			clientRequests, clientWatches, clientConnections, clientDials, clientEvictions, clientTokenChecks,
			viewBatches, viewRefused, viewReopens, viewResumesRefused, copyRestores, copyReads, copyAge, copyObjects, offlineSince, syncs, progressRequests, leaseForgets,
			observedChanges, observedOutside, unobserved, copyVouched, copyRefusals, copyWrites)
		// How the kubelet's channels fared when a hub replica went:
		// nodeproxy_watchmux_client_resumes_total{outcome}.
		watchmux.RegisterClientMetrics()
	})
}
