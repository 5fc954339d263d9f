package bulk

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	nodeauthorizer "github.com/nodeproxy/nodeproxy/authorizer"
	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// DefaultBookmarkInterval is how often channels that allow bookmarks get
// one: kube-apiserver's watch cache sends them about once a minute.
const DefaultBookmarkInterval = time.Minute

// Watcher opens bulk watch channels (it is the watchmux.Handler of the
// bulk watch): it validates and authorizes a channel's selector as a bulk
// get operation, sends the initial state from a snapshot, then hands the
// channel to its type's dispatcher. A node's channel on a named object is
// also registered for revocation: when the graph says the node no longer
// reaches the object, the channel ends with ERROR 403. Channels of other
// users are authorized again every ReauthorizeInterval and end with ERROR
// 403 once refused.
type Watcher struct {
	getter       *Getter
	latest       *latestChecker // nil: kube-apiserver is never asked
	dispatchers  map[*cache.Store]*dispatcher
	revocations  *revocations
	reauthorizer *reauthorizer
}

// WatcherOptions tune a Watcher.
type WatcherOptions struct {
	// BookmarkInterval is how often channels that allow bookmarks get
	// one.
	BookmarkInterval time.Duration
	// ReauthorizeInterval is how often the channels of users other than
	// nodes are authorized again.
	ReauthorizeInterval time.Duration
	// Latest asks kube-apiserver which resourceVersion it has reached for
	// a type, for channels that resume from a version this replica's
	// cache has not reached yet (moved from another replica). Nil: such a
	// channel waits for the cache, up to 3 s, then 504.
	Latest LatestVersions
}

// DefaultWatcherOptions returns the defaults.
func DefaultWatcherOptions() WatcherOptions {
	return WatcherOptions{BookmarkInterval: DefaultBookmarkInterval, ReauthorizeInterval: DefaultReauthorizeInterval}
}

// Observable is the graph's change notification; *graph.Graph is one.
type Observable interface {
	Observe(graph.Observer)
}

// NewWatcher serves channels from g's cache, revoking them on g's graph
// changes.
func NewWatcher(g *Getter, changes Observable, o WatcherOptions) *Watcher {
	w := &Watcher{getter: g, dispatchers: map[*cache.Store]*dispatcher{}, revocations: newRevocations(),
		reauthorizer: newReauthorizer(g, o.ReauthorizeInterval)}
	if o.Latest != nil {
		w.latest = newLatestChecker(o.Latest)
	}
	for _, s := range g.stores {
		w.dispatchers[s] = newDispatcher(s, g.cache.Encoder(), o.BookmarkInterval)
	}
	changes.Observe(w.revocations.observe)
	return w
}

// Run dispatches changes to channels until ctx ends. Start it once the
// cache has synced.
func (w *Watcher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, d := range w.dispatchers {
		wg.Go(func() { d.run(ctx) })
	}
	wg.Go(func() { w.reauthorizer.run(ctx) })
	wg.Wait()
}

var _ watchmux.Handler = (*Watcher)(nil)

// Open implements watchmux.Handler.
func (w *Watcher) Open(ctx context.Context, sel *v1alpha1.GetOperation, sink watchmux.Sink) (func(), *metav1.Status) {
	u, ok := request.UserFrom(ctx)
	if !ok {
		return nil, &apierrors.NewInternalError(errors.New("no user in the request context")).ErrStatus
	}
	q, errs, err := parseWatch(sel, func(r metav1.GroupVersionResource) *cache.Store { return w.getter.stores[r] }, w.getter.uncached)
	if err != nil {
		return nil, &apierrors.NewInternalError(fmt.Errorf("look up the channel's resource type: %w", err)).ErrStatus
	}
	if len(errs) > 0 {
		return nil, &apierrors.NewInvalid(v1alpha1.SchemeGroupVersion.WithKind("BulkGetOperation").GroupKind(), "", errs).ErrStatus
	}
	if q.uncached != nil {
		return w.openUncached(ctx, q, sink)
	}
	s := &stream{q: q, sink: sink, graph: w.getter.graph, encoder: w.getter.cache.Encoder()}
	d := w.dispatchers[q.store]
	sink.OnClose(func() { d.unregister(s) })

	// A node's channel on one object lives as long as the node reaches
	// it. Registered before the check, so that a revocation between the
	// check and the registration cannot be missed.
	node, isNode := nodeauthorizer.NodeName(u)
	if isNode && q.kind != 0 && q.namesOneObject() {
		ref := graph.ObjectRef{Kind: q.kind, Namespace: q.namespace, Name: q.name}
		w.revocations.add(node, ref, s)
		sink.OnClose(func() { w.revocations.remove(node, ref, s) })
	}
	if err := w.getter.authorize(ctx, u, q); err != nil {
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			st := status.Status()
			return nil, &st
		}
		return nil, &apierrors.NewInternalError(err).ErrStatus
	}
	if !isNode {
		// Other users' rights live in RBAC (or whatever kube-apiserver
		// delegates to), which tells nobody when it changes: ask again
		// from time to time.
		w.reauthorizer.add(s, u)
		sink.OnClose(func() { w.reauthorizer.remove(s) })
	}
	// A channel from a resourceVersion this replica has not reached (its
	// client was on another replica, or on kube-apiserver) is held here,
	// before it is announced, so that a 504 is a refusal: the node
	// endpoint then asks kube-apiserver instead.
	if q.rvSet {
		var err error
		if q.initialEvents != nil && *q.initialEvents {
			_, err = readAt(ctx, q.store, q.rv)
		} else {
			err = resumeAt(ctx, q.store, q.rv, w.latest)
		}
		if err != nil {
			var st apierrors.APIStatus
			if !errors.As(err, &st) {
				return nil, &apierrors.NewInternalError(err).ErrStatus
			}
			status := st.Status()
			return nil, &status
		}
	}
	return func() { w.start(s, d) }, nil
}

// start sends the initial state, if the selector asks for it, and joins
// the dispatcher.
//
// sendInitialEvents with a resourceVersion X (a streaming list resumed by
// client-go's reflector after a failed attempt, with resourceVersionMatch
// NotOlderThan) is kube-apiserver's: the state at a version no older than
// X (Open has waited for the cache to reach X), then the
// initial-events-end bookmark, then the changes. Treating X as a resume
// point instead would never send the bookmark, and the reflector would
// wait for it forever.
func (w *Watcher) start(s *stream, d *dispatcher) {
	q := s.q
	from := q.rv
	sendInitial := q.initialEvents != nil && *q.initialEvents
	if sendInitial || !q.rvSet && q.initialEvents == nil {
		snap := q.store.Snapshot()
		var err error
		visit := func(o *cache.Object) bool {
			if !q.matches(o, s.graph) {
				return true
			}
			b, encErr := s.encoder.Encode(q.store, o)
			if encErr != nil {
				err = encErr
				return false
			}
			return s.sink.Initial(watch.Added, b)
		}
		q.ascend(snap, q.namespace, "", visit)
		if err != nil {
			s.sink.Close(&apierrors.NewInternalError(err).ErrStatus)
			return
		}
		from = snap.RV
		if sendInitial {
			s.sink.Initial(watch.Bookmark, bookmarkObject(q.store, snap.RV, true))
		}
	} else if !q.rvSet {
		from = q.store.Snapshot().RV
	}
	resumed := q.rvSet && !sendInitial
	how, err := d.register(s, from, resumed)
	if resumed {
		observeResume(q.store, how)
	}
	if err != nil {
		s.sink.Close(&metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired,
			Message: fmt.Sprintf("resourceVersion %d is older than nodeproxy's cache holds for %s; list again and resubscribe", from, q.store.Resource.Resource)})
	}
}

// stream is one channel's selector and where it is.
type stream struct {
	q       *query
	sink    watchmux.Sink
	graph   Reachability
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
	was := e.Prev != nil && s.q.matches(e.Prev, s.graph)
	is := e.Type != watch.Deleted && s.q.matches(e.Object, s.graph)
	var t watch.EventType
	switch {
	case e.Type == watch.Deleted && was, was && !is:
		t = watch.Deleted
	case was && is:
		t = watch.Modified
	case is:
		t = watch.Added
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
