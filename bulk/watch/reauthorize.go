package watch

import (
	"context"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/bulk"
)

// DefaultReauthorizeInterval is how often the channels of users other than
// nodes are authorized again.
const DefaultReauthorizeInterval = time.Minute

// reauthorizer asks again, every interval, whether each open channel of a
// user other than a node, or of a node on a type the graph does not
// decide (its rights there are RBAC's), may still watch what it selects,
// and closes with ERROR 403 those it no longer may: an
// RBAC binding removed reaches open channels within the interval plus the
// authorization cache's TTL. (kube-apiserver authorizes a watch only when
// it starts; its watches end after 30-60 minutes and are authorized again
// when the client reopens them. nodeproxy's channels have no such end.)
// A node's channels on the graph's types need none of this: the graph's
// changes close them the moment access is lost (revocations).
//
// One goroutine asks, one channel at a time: a round over many channels
// takes longer than the interval rather than sending kube-apiserver a
// burst. An authorizer error keeps the channel (it was allowed, and is
// not allowed anything new) and is counted; the next round asks again.
type reauthorizer struct {
	catalog  *bulk.Catalog
	interval time.Duration

	mu      sync.Mutex
	streams map[*stream]user.Info // guarded by mu
}

func newReauthorizer(c *bulk.Catalog, interval time.Duration) *reauthorizer {
	return &reauthorizer{catalog: c, interval: interval, streams: map[*stream]user.Info{}}
}

func (r *reauthorizer) add(s *stream, u user.Info) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.streams[s] = u
}

func (r *reauthorizer) remove(s *stream) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.streams, s)
}

func (r *reauthorizer) run(ctx context.Context) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.round(ctx)
		}
	}
}

// round authorizes every registered channel once.
func (r *reauthorizer) round(ctx context.Context) {
	r.mu.Lock()
	streams := make(map[*stream]user.Info, len(r.streams))
	for s, u := range r.streams {
		streams[s] = u
	}
	r.mu.Unlock()
	for s, u := range streams {
		if ctx.Err() != nil {
			return
		}
		if s.dead.Load() {
			continue
		}
		err := r.catalog.Authorize(ctx, u, s.q)
		switch {
		case err == nil:
			reauthorizations.WithLabelValues("allowed").Inc()
		case apierrors.IsForbidden(err):
			reauthorizations.WithLabelValues("denied").Inc()
			s.dead.Store(true)
			s.sink.Close(&metav1.Status{
				Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
				Message: "access lost: " + err.Error(),
			})
		default:
			reauthorizations.WithLabelValues("error").Inc()
			klog.ErrorS(err, "Authorizing an open bulk watch channel again; keeping it until the next round", "user", u.GetName())
		}
	}
}
