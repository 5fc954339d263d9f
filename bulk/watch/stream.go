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
	if e.RV <= s.after || s.dead.Load() {
		return
	}
	was := e.Prev != nil && s.q.Matches(e.Prev, s.graph)
	is := e.Type != apiwatch.Deleted && s.q.Matches(e.Object, s.graph)
	var t apiwatch.EventType
	switch {
	case e.Type == apiwatch.Deleted && was, was && !is:
		t = apiwatch.Deleted
	case was && is:
		t = apiwatch.Modified
	case is:
		t = apiwatch.Added
	default:
		return
	}
	b, err := e.bytes()
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
