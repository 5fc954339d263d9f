package watch

import (
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/bulk"
	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// stream is one channel's selector and where it is.
type stream struct {
	q       *bulk.Query
	sink    watchmux.Sink
	graph   bulk.Reachability
	encoder *cache.Encoder
	// after: events at or before it are already reflected (set under the
	// dispatcher's lock before the stream is indexed).
	after uint64
	dead  atomic.Bool
}

// deliver turns a change into the event this channel sees, as
// kube-apiserver does for a watch with selectors: an object entering the
// selection is ADDED, leaving it DELETED.
func (s *stream) deliver(e *encodedEvent) {
	if !s.wants(e) {
		return
	}
	if t, ok := eventFor(e, s.q, s.graph); ok {
		s.send(e, t)
	}
}

// wants reports whether e is news to this channel: after what it has
// seen, and the channel still open.
func (s *stream) wants(e *encodedEvent) bool {
	return e.RV > s.after && !s.dead.Load()
}

// encode is o in the encoding the channel asked for.
func (s *stream) encode(store *cache.Store, o *cache.Object) ([]byte, error) {
	if s.sink.Protobuf() {
		return s.encoder.EncodeProtobuf(store, o)
	}
	return s.encoder.Encode(store, o)
}

// eventFor is the event a change is to a watch selecting q: ADDED when the
// object enters the selection, MODIFIED while in it, DELETED when it
// leaves it or is deleted; false when the change is none of its business.
func eventFor(e *encodedEvent, q *bulk.Query, g bulk.Reachability) (apiwatch.EventType, bool) {
	was := e.Prev != nil && q.Matches(e.Prev, g)
	is := e.Type != apiwatch.Deleted && q.Matches(e.Object, g)
	switch {
	case e.Type == apiwatch.Deleted && was, was && !is:
		return apiwatch.Deleted, true
	case was && is:
		return apiwatch.Modified, true
	case is:
		return apiwatch.Added, true
	}
	return "", false
}

// send sends e as t, closing the channel if its object cannot be encoded.
func (s *stream) send(e *encodedEvent, t apiwatch.EventType) {
	b, err := e.bytes(s.sink.Protobuf())
	if err != nil {
		klog.ErrorS(err, "Encoding an object for a bulk watch")
		s.dead.Store(true)
		s.sink.Close(&apierrors.NewInternalError(err).ErrStatus)
		return
	}
	if !s.sink.Send(t, b) {
		s.dead.Store(true)
	}
}
