package watch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	nodeauthorizer "github.com/nodeproxy/nodeproxy/authorizer"
	"github.com/nodeproxy/nodeproxy/bulk"
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
// users, and a node's on the types the graph does not decide, are
// authorized again after an RBAC change that names their user (Recheck),
// and every ReauthorizeInterval if set, and end with ERROR 403 once
// refused.
type Watcher struct {
	catalog      *bulk.Catalog
	dispatchers  map[*cache.Store]*dispatcher
	revocations  *revocations
	reauthorizer *reauthorizer
}

// Options tune a Watcher.
type Options struct {
	// BookmarkInterval is how often channels that allow bookmarks get
	// one.
	BookmarkInterval time.Duration
	// ReauthorizeInterval is how often, if at all, every channel
	// kube-apiserver decides (those of users other than nodes, and a
	// node's on the types the graph does not decide) is authorized
	// again, whatever changed: for an authorizer whose changes nobody
	// reports (a webhook, ABAC). 0: only after RBAC changes (Recheck).
	ReauthorizeInterval time.Duration
	// RBACRecheckAfter are the delays, from when an RBAC change is
	// reported to Recheck, of the rounds that authorize again the
	// channels of the users it names: the first past the authorizer's
	// cached answers, the next after kube-apiserver's RBAC has surely
	// heard of the change too.
	RBACRecheckAfter []time.Duration
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options {
	return Options{BookmarkInterval: DefaultBookmarkInterval}
}

// Observable is the graph's change notification; *graph.Graph is one.
type Observable interface {
	Observe(graph.Observer)
}

// NewWatcher serves channels on the types of c, revoking them on the
// graph's changes.
func NewWatcher(c *bulk.Catalog, changes Observable, o Options) *Watcher {
	RegisterMetrics()
	w := &Watcher{catalog: c, dispatchers: map[*cache.Store]*dispatcher{}, revocations: newRevocations(),
		reauthorizer: newReauthorizer(c, o.ReauthorizeInterval, o.RBACRecheckAfter)}
	for _, s := range c.Stores() {
		w.dispatchers[s] = newDispatcher(s, c.Encoder(), o.BookmarkInterval)
	}
	changes.Observe(w.revocations.observe)
	rbacWatched.Set(0) // until RBACWatched
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

// Recheck reports an RBAC change, seen at seen, that may have taken
// access from subjects: their open channels are authorized again after
// each of Options.RBACRecheckAfter. It never waits.
func (w *Watcher) Recheck(subjects Subjects, seen time.Time) {
	w.reauthorizer.recheck(subjects, seen)
}

// RBACWatched says that from now on every RBAC change is reported to
// Recheck: until then, every channel is authorized again every
// UnwatchedReauthorizeInterval.
func (w *Watcher) RBACWatched() {
	w.reauthorizer.watched.Store(true)
	rbacWatched.Set(1)
}

var _ watchmux.Handler = (*Watcher)(nil)

// Open implements watchmux.Handler.
func (w *Watcher) Open(ctx context.Context, sel *v1alpha1.GetOperation, sink watchmux.Sink) (func(), *metav1.Status) {
	u, ok := request.UserFrom(ctx)
	if !ok {
		return nil, &apierrors.NewInternalError(errors.New("no user in the request context")).ErrStatus
	}
	q, errs, err := w.catalog.ParseWatch(sel)
	if st, refused := err.(apierrors.APIStatus); refused {
		status := st.Status()
		return nil, &status
	}
	if err != nil {
		return nil, &apierrors.NewInternalError(fmt.Errorf("look up the channel's resource type: %w", err)).ErrStatus
	}
	if len(errs) > 0 {
		return nil, &apierrors.NewInvalid(v1alpha1.SchemeGroupVersion.WithKind("BulkGetOperation").GroupKind(), "", errs).ErrStatus
	}
	if q.Uncached() != nil {
		return w.openUncached(ctx, q, sink)
	}
	s := &stream{q: q, sink: sink, graph: w.catalog.Reachability(), encoder: w.catalog.Encoder()}
	d := w.dispatchers[q.Store()]
	sink.OnClose(func() { d.unregister(s) })

	// A node's channel on one object lives as long as the node reaches
	// it. Registered before the check, so that a revocation between the
	// check and the registration cannot be missed.
	node, isNode := nodeauthorizer.NodeName(u)
	if isNode && q.Kind() != 0 && q.NamesOneObject() {
		ref := graph.ObjectRef{Kind: q.Kind(), Namespace: q.Namespace(), Name: q.Name()}
		w.revocations.add(node, ref, s)
		sink.OnClose(func() { w.revocations.remove(node, ref, s) })
	}
	if err := w.catalog.Authorize(ctx, u, q); err != nil {
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			st := status.Status()
			return nil, &st
		}
		return nil, &apierrors.NewInternalError(err).ErrStatus
	}
	if !isNode || !q.GraphDecided() {
		// Other users' rights live in RBAC (or whatever kube-apiserver
		// delegates to), and so do a node's beyond its graph (an
		// endpointslice, a servicecidr), which tell nobody when they
		// change: ask again from time to time.
		w.reauthorizer.add(s, u)
		sink.OnClose(func() { w.reauthorizer.remove(s) })
	}
	// A channel from a resourceVersion this replica has not reached (its
	// client was on another replica, or on kube-apiserver) is held here,
	// before it is announced, so that a 504 is a refusal: the node
	// endpoint then asks kube-apiserver instead.
	// So is a streaming list from "" (a consistent read): its initial
	// state, sent from the store's state when it starts, must be no older
	// than kube-apiserver's when the channel was asked for.
	if err := w.await(ctx, q); err != nil {
		var st apierrors.APIStatus
		if !errors.As(err, &st) {
			return nil, &apierrors.NewInternalError(err).ErrStatus
		}
		status := st.Status()
		return nil, &status
	}
	return func() { w.start(s, d) }, nil
}

// await holds a channel until the store can serve it: a streaming list
// from "" until the store holds kube-apiserver's state as of now; one
// from X until it has reached X; a resume from X until it, or
// kube-apiserver, has reached X.
func (w *Watcher) await(ctx context.Context, q *bulk.Query) error {
	if q.Consistent() {
		start := time.Now()
		latest, err := w.catalog.ConsistentVersion(ctx, q.Store(), "watch", start)
		if err != nil {
			return err
		}
		_, err = w.catalog.ReadConsistent(ctx, q, latest, start)
		return err
	}
	rv, set := q.ResourceVersion()
	switch {
	case !set:
		return nil
	case q.InitialEvents() != nil && *q.InitialEvents():
		_, err := bulk.ReadAt(ctx, q.Store(), rv)
		return err
	}
	return bulk.ResumeAt(ctx, q.Store(), rv, w.catalog.Latest())
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
	q, store := s.q, s.q.Store()
	from, rvSet := q.ResourceVersion()
	initial := q.InitialEvents()
	sendInitial := initial != nil && *initial
	if sendInitial || !rvSet && initial == nil {
		snap := store.Snapshot()
		var err error
		visit := func(o *cache.Object) bool {
			if !q.Matches(o, s.graph) {
				return true
			}
			b, encErr := s.encode(store, o)
			if encErr != nil {
				err = encErr
				return false
			}
			return s.sink.Initial(apiwatch.Added, b)
		}
		q.Ascend(snap, q.Namespace(), "", visit)
		if err != nil {
			s.sink.Close(&apierrors.NewInternalError(err).ErrStatus)
			return
		}
		from = snap.RV
		if sendInitial {
			s.sink.Initial(apiwatch.Bookmark, bookmarkObject(store, snap.RV, true))
		}
	} else if !rvSet {
		from = store.Snapshot().RV
	}
	resumed := rvSet && !sendInitial
	how, err := d.register(s, from, resumed)
	if resumed {
		observeResume(store, how)
	}
	if err != nil {
		s.sink.Close(&metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired,
			Message: fmt.Sprintf("resourceVersion %d is older than nodeproxy's cache holds for %s; list again and resubscribe", from, store.Resource.Resource)})
	}
}
