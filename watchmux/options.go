package watchmux

import "time"

// Options bound one connection. The defaults are sized for a kubelet: a
// node with 110 pods, each referencing a few secrets and configmaps,
// holds a few hundred channels.
type Options struct {
	// MaxChannels open at once on one connection. Beyond it a Watch is
	// refused (429) and the others are untouched.
	MaxChannels int
	// MaxPending is how many Watch requests one connection may have in
	// flight (being authorized and started). Beyond it a request is
	// refused (429) at once: a flood costs the reader nothing.
	MaxPending int
	// ChannelQueue is how many events one channel may have waiting to be
	// written. A channel that exceeds it gets ERROR 410 ("too slow") and is
	// closed; it never holds back other channels or connections. Each
	// waiting event costs about 80 bytes: the object's encoded bytes are
	// shared with the cache.
	ChannelQueue int
	// ReadLimit is the largest message a client may send.
	ReadLimit int64
	// WriteTimeout bounds one write; a client that does not read for
	// that long is disconnected.
	WriteTimeout time.Duration
	// PingInterval is how often the server pings; a client silent (no
	// pong, no message) for two intervals is disconnected.
	PingInterval time.Duration
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options {
	return Options{
		MaxChannels:  4096,
		MaxPending:   64,
		ChannelQueue: 1024,
		// A Watch request is a selector: a few hundred bytes.
		ReadLimit:    64 << 10,
		WriteTimeout: 10 * time.Second,
		// Under the 60 s idle timeout of common load balancers.
		PingInterval: 30 * time.Second,
	}
}

// DrainTimeout bounds how long a connection takes to end on shutdown: the
// batch its writer is writing, the close frame, and the client's answer
// to it, each bounded by WriteTimeout.
func (o Options) DrainTimeout() time.Duration { return 3 * o.WriteTimeout }
