package watchmux

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	connectionsGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "nodeproxy", Subsystem: "watchmux", Name: "connections",
		Help: "Open bulk watch connections.", StabilityLevel: metrics.ALPHA,
	})
	channelsGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "nodeproxy", Subsystem: "watchmux", Name: "channels",
		Help: "Open bulk watch channels, over all connections.", StabilityLevel: metrics.ALPHA,
	})
	requestsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "watchmux", Name: "requests_total",
		Help: "Client requests, by result: opened, closed, refused, invalid, too_many_channels, too_many_pending, " +
			"progress (a progress request handed to its channel), progress_refused (its channel not open, or not one that takes them).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	closedTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "watchmux", Name: "channels_closed_total",
		Help:           "Channels closed, by reason: client, expired (too slow, or resume point gone), forbidden (access lost), unauthorized (the caller's credential no longer authenticates), shutdown (the server shutting down, or the connection at its maximum age), other.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	framesTotal = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "watchmux", Name: "frames_written_total",
		Help: "Messages written to clients: events and responses.", StabilityLevel: metrics.ALPHA,
	})
	batchFrames = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "nodeproxy", Subsystem: "watchmux", Name: "write_batch_frames",
		Help: "Messages a connection's writer found queued when it woke and wrote in one batch: the depth of its queue. " +
			"Batches near the channel queue limit mean a client close to falling behind.",
		Buckets:        metrics.ExponentialBuckets(1, 4, 8), // 1 .. 16384
		StabilityLevel: metrics.ALPHA,
	})
	writeTimeoutsTotal = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "watchmux", Name: "write_timeouts_total",
		Help: "Connections closed because a write did not finish within the write timeout.", StabilityLevel: metrics.ALPHA,
	})

	shutdownTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "watchmux", Name: "shutdown_connections_total",
		Help: "Connections ended by a shutdown, by result: closed (close frame 1001 written after the ERRORs), " +
			"write_failed (the close frame could not be written), cut (still writing when the shutdown's time ran out).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	registerOnce sync.Once
)

// RegisterMetrics registers watchmux's metrics with the legacy registry
// that k8s.io/apiserver serves on /metrics.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(connectionsGauge, channelsGauge, requestsTotal, closedTotal, framesTotal, batchFrames, writeTimeoutsTotal, shutdownTotal)
	})
}

// counters are the series a connection updates.
type counters struct {
	channels      metrics.GaugeMetric
	requests      *metrics.CounterVec
	closed        *metrics.CounterVec
	written       metrics.CounterMetric
	batch         metrics.ObserverMetric
	writeTimeouts metrics.CounterMetric
}

// The Go client's series (Session), registered by RegisterClientMetrics in
// the programs that run it.
var (
	clientReconnectsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "watchmux_client", Name: "reconnects_total",
		Help:           "Dials of a resuming bulk watch client after its connection ended, by result: ok, error.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	clientResumesTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "watchmux_client", Name: "resumes_total",
		Help: "Channels of a resuming bulk watch client carried over a lost connection, by outcome: " +
			"reopened (the new connection accepted the channel from its last resourceVersion), " +
			"expired (of those reopened, the ones that then got ERROR 410 at once: the consumer relists), " +
			"refused (the new connection refused the channel; its Status went to the consumer), " +
			"lost_initial (lost while the initial events were half delivered: ERROR 410 to the consumer), " +
			"timed_out (no connection took the channel back within the resume timeout: its events end, the consumer resumes elsewhere).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"outcome"})
	clientOverflowsTotal = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "watchmux_client", Name: "overflows_total",
		Help: "Channels a bulk watch client closed with ERROR 410 (too slow) because their consumer left ClientEventBuffer events unread. " +
			"Never during a channel's initial state, which the client holds whole (events_held).",
		StabilityLevel: metrics.ALPHA,
	})
	clientEventsHeld = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "nodeproxy", Subsystem: "watchmux_client", Name: "events_held",
		Help: "Events of channels opened with initial events that a bulk watch client has taken off its connections and not yet handed to their consumers: " +
			"an initial state is held whole however slowly it is consumed (what a list of the same objects costs); after it, at most ClientEventBuffer a channel.",
		StabilityLevel: metrics.ALPHA,
	})

	clientRedirectsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeproxy", Subsystem: "watchmux_client", Name: "redirects_total",
		Help: "Redirects (307 with a Location: a sharded hub naming the replica that owns the caller's node) a bulk watch client's upgrades met, by result: " +
			"followed, refused (not https, unreadable, or past the most one dial follows: the dial fails).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	registerClientOnce sync.Once
)

// RegisterClientMetrics registers the resuming client's metrics with the
// legacy registry.
func RegisterClientMetrics() {
	registerClientOnce.Do(func() {
		legacyregistry.MustRegister(clientReconnectsTotal, clientResumesTotal, clientOverflowsTotal, clientEventsHeld, clientRedirectsTotal)
	})
}
