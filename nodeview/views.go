package nodeview

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"net/http"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
)

// DefaultBookmarkInterval is how often a view whose position moved
// without sending it anything gets a bookmark: the bulk watch's interval,
// kube-apiserver's watch cache's.
const DefaultBookmarkInterval = time.Minute

// Views follows the cache for every open view: one goroutine (Run) takes
// the stores' changes in steps and hands each to the views it may
// concern, found through indexes (by node for pods and Nodes, by object
// for what the graph decides, every view for the cluster-wide types), as
// the bulk watch's dispatchers do. A view costs no goroutine.
//
// Step is the whole of a round, synchronous: tests drive it directly.
// mu is held for a step and for nothing else that waits; sends never
// block (watchmux queues them).
type Views struct {
	stores   [numTypes]*cache.Store
	live     Reachability
	interval time.Duration
	wake     chan struct{}
	now      func() time.Time // the clock of holds; tests set it

	mu      sync.Mutex
	st      state    // guarded by mu: the cache at pos
	pos     Position // guarded by mu
	started bool     // guarded by mu
	// holding is the pod change held back (see holdLocked), and since
	// when; 0 when none.
	holding     uint64                        // guarded by mu
	holdingFrom time.Time                     // guarded by mu
	byNode      map[string]map[*view]struct{} // guarded by mu
	reached     *reachIndex                   // guarded by mu: what views reach, by object
	all         map[*view]struct{}            // guarded by mu: joined views
	joining     []*joinRequest                // guarded by mu

	// gone holds views closed since the last step. A view closes on
	// whatever goroutine closed its channel, the stepping one inside a
	// send among them, so it must not take mu.
	gone inbox[*view]
	// asked holds the progress requests since the last step, in the
	// order they came (requestProgress): the connection's reader hands
	// them over, and must not wait for a step to do it.
	asked inbox[askedProgress]
	// fresh shows progress requests fresh before they go to asked (nil:
	// answered at the stores' versions); proving holds them meanwhile.
	fresh Freshness
	// heardWithin: a store that heard from kube-apiserver within it,
	// its watch working, is not asked about (ProveFreshness).
	heardWithin time.Duration
	proving     proving
}

// inbox hands values to the stepping goroutine from any other, under a
// lock of its own held for an append or a swap: whoever puts never waits
// for a step, and a step never waits for more than a swap.
type inbox[T any] struct {
	mu    sync.Mutex
	items []T // guarded by mu
}

func (b *inbox[T]) put(x T) {
	b.mu.Lock()
	b.items = append(b.items, x)
	b.mu.Unlock()
}

// take returns what was put since the last take, in order.
func (b *inbox[T]) take() []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	items := b.items
	b.items = nil
	return items
}

type joinRequest struct {
	v      *view
	from   Position
	resume bool
}

// NewViews serves views of c's types, deciding reachability with live
// before anything of the graph's kinds is sent.
func NewViews(c *cache.Cache, live Reachability, bookmarkInterval time.Duration) (*Views, error) {
	RegisterMetrics()
	m := &Views{
		live: live, interval: bookmarkInterval, wake: make(chan struct{}, 1), now: time.Now,
		byNode: map[string]map[*view]struct{}{}, reached: newReachIndex(), all: map[*view]struct{}{},
	}
	for i, t := range types {
		s := c.Store(t.gvr)
		if s == nil {
			return nil, fmt.Errorf("the cache does not hold %s, which node views carry", t.gvr.Resource)
		}
		m.stores[i] = s
	}
	m.st = state{stores: &m.stores, encoder: c.Encoder()}
	return m, nil
}

// Run steps whenever a store publishes or a view asks to join, and sends
// bookmarks every interval, until ctx ends. Start it once the cache has
// synced: before that a store's state would read as "no such object".
func (m *Views) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, s := range m.stores {
		wg.Go(func() {
			for {
				select {
				case <-s.Snapshot().Next():
					m.poke()
				case <-ctx.Done():
					return
				}
			}
		})
	}
	bookmarks := time.NewTicker(m.interval)
	defer bookmarks.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.wake:
			m.Step()
		case <-bookmarks.C:
			m.Step()
			m.Bookmark()
		}
	}
}

// poke asks for a step; wake's one slot is enough, as a step takes in
// everything published before it.
func (m *Views) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// join adds v at the next step: with its initial state, or, resumed, from
// the consumer's position once the hub's has reached it.
func (m *Views) join(v *view, from Position, resume bool) {
	m.mu.Lock()
	m.joining = append(m.joining, &joinRequest{v: v, from: from, resume: resume})
	m.mu.Unlock()
	m.poke()
}

// remove is called when v's channel closes, on any goroutine.
func (m *Views) remove(v *view) {
	m.gone.put(v)
	m.poke()
}

// Step takes in every change the stores have published since the last
// step, type by type in types order, then joins the views waiting to,
// then sends a bookmark to every view it sent something and to every
// view whose position now answers a progress request: the events
// between two bookmarks are one batch, the change of the view from one
// position to the next.
func (m *Views) Step() {
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.st.forgetDecoded()
	m.sweepLocked()
	m.takeAskedLocked()
	if !m.started {
		m.startLocked()
	}
	for i := range types {
		snap := m.stores[i].Snapshot()
		if snap.RV == m.pos.At[i] && snap != m.st.snaps[i] {
			// A sharded cache that acquired or dropped ranges publishes
			// their objects at the version it was at, without events
			// (cache.Store.HeldSince): views opened from now on must
			// see them, and no open view is of those nodes.
			m.st.snaps[i] = snap
		}
		if snap.RV <= m.pos.At[i] {
			continue
		}
		events, err := snap.Changes(m.pos.At[i])
		if err != nil {
			// The store started its log over (a relist it could not carry
			// on): no view can be told what changed. Each starts again.
			m.expireAllLocked(fmt.Sprintf("the hub's cache relisted %s; open the view again without a position", types[i].gvr.Resource))
			m.advanceLocked(i, snap)
			m.pos.Since[i] = snap.RV
			if i == pvIndex {
				m.st.claims = claimsAt(snap)
			}
			continue
		}
		held := false
		for _, e := range events {
			if i == podIndex && m.holdLocked(e) {
				// Take the pods in up to the change before it; the
				// rest waits for the next step.
				if before, err := snap.At(e.PrevRV); err == nil {
					m.advanceLocked(i, before)
					held = true
					break
				}
			}
			m.routeLocked(i, e)
			m.pos.Since[i] = e.RV
		}
		if !held {
			m.advanceLocked(i, snap)
		}
	}
	m.joinLocked()
	m.markLocked(false)
	m.observeLocked()
}

// Bookmark sends the current position to every view whose last bookmark
// is older, so that a quiet view still has a recent resume point.
// Position is where the views are.
func (m *Views) Position() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pos.String()
}

func (m *Views) Bookmark() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.markLocked(true)
}

func (m *Views) startLocked() {
	for i, s := range m.stores {
		m.advanceLocked(i, s.Snapshot())
		// The last change before is unknown: the state is known at this
		// version only.
		m.pos.Since[i] = m.pos.At[i]
	}
	m.st.claims = claimsAt(m.st.snaps[pvIndex])
	m.started = true
}

func (m *Views) advanceLocked(i int, snap *cache.Snapshot) {
	m.st.snaps[i] = snap
	m.pos.At[i] = snap.RV
}

// referenceWait bounds how long a pod change is held back for an object
// it uses that may still be on its way to this replica's cache: as long
// as the authorizer waits for a graph that lags (--node-refresh-timeout's
// default). A reference created after its pod, in a type whose store
// hears nothing newer than the pod meanwhile, costs the pod that long.
const referenceWait = 2 * time.Second

// holdLocked says whether the pod change e must wait: a pod of a node
// with an open view uses an object this replica's cache does not have,
// in a type whose store has not reached e's version. etcd's versions are
// one sequence over every type, so the object, if created before the
// pod, has a smaller version, and a store that has reached e's version
// would hold it: then it does not exist, and the pod goes. A store
// behind may just be slower than the pods' (each type has its own watch
// of kube-apiserver): the pod waits for it, at most referenceWait, so
// that it never reaches a node before what it uses, even where the
// stores lag each other.
func (m *Views) holdLocked(e *cache.Event) bool {
	o := e.Object
	if e.Type == watch.Deleted || len(m.byNode[o.NodeName]) == 0 {
		return false
	}
	if o.SameSpec(e.Prev) {
		// The references of the version before, which went through
		// here when it came: a status write is not held, and costs no
		// decode.
		return false
	}
	uses, err := m.st.podUses(o)
	if err != nil {
		return false // its node's view fails on it (applyPod)
	}
	for _, r := range uses {
		i := typeOfKind[r.Kind]
		if i < 0 || m.pos.At[i] >= e.RV {
			continue
		}
		if _, ok := m.st.get(i, r.Namespace, r.Name); ok {
			continue
		}
		now := m.now()
		if m.holding != e.RV {
			m.holding, m.holdingFrom = e.RV, now
			time.AfterFunc(referenceWait, m.poke)
		}
		if now.Sub(m.holdingFrom) < referenceWait {
			return true
		}
		heldTooLong.Inc()
		klog.V(2).InfoS("A pod goes to its node's view without an object it uses, which the cache still lacks", "node", o.NodeName,
			"namespace", o.Namespace, "pod", o.Name, "uses", r.String(), "waited", referenceWait)
		return false
	}
	return false
}

// routeLocked hands e to the views it may concern. Each view decides for
// itself (view.apply); the indexes only spare the others.
func (m *Views) routeLocked(i int, e *cache.Event) {
	o, prev := e.Object, e.Prev
	var targets []*view
	addAll := func(views iter.Seq[*view]) {
		for v := range views {
			if !v.dead && !containsView(targets, v) {
				targets = append(targets, v)
			}
		}
	}
	add := func(set map[*view]struct{}) { addAll(maps.Keys(set)) }
	switch t := types[i]; t.role {
	case reached:
		addAll(m.reached.views(graph.ObjectRef{Kind: t.kind, Namespace: o.Namespace, Name: o.Name}))
	case boundVolume:
		if c, ok := claimOf(prev); ok {
			addAll(m.reached.views(c))
		}
		if c, ok := claimOf(o); ok {
			addAll(m.reached.views(c))
		}
		// Routed before the index moves: a view decides by what it
		// holds and by the event, not by the index. A deleted volume is
		// bound to nothing: its last state still names its claim, and
		// kept in the index it would bring a volume created again under
		// its name, bound elsewhere, into the views of the old claim.
		now := o
		if e.Type == watch.Deleted {
			now = nil
		}
		defer bindClaims(m.st.claims, prev, now)
	case ownNode:
		add(m.byNode[o.Name])
	case clusterWide:
		add(m.all)
	case podNamespaces:
		if ref, ok := namespaceOf(o); ok {
			addAll(m.reached.views(ref))
		} else {
			add(m.all)
		}
	case ownPods:
		add(m.byNode[o.NodeName])
		if prev != nil && prev.NodeName != o.NodeName {
			add(m.byNode[prev.NodeName])
		}
	}
	for _, v := range targets {
		v.apply(i, e, &m.st)
	}
}

func containsView(vs []*view, v *view) bool {
	for _, w := range vs {
		if w == v {
			return true
		}
	}
	return false
}

// joinLocked joins the views waiting to. A resumed view joins once the
// hub has taken in every change the consumer holds (Position.reaches):
// its handler waited for every store to, so the step after that has.
func (m *Views) joinLocked() {
	waiting := m.joining[:0]
	for _, j := range m.joining {
		switch {
		case j.v.dead:
		case j.resume && !m.pos.Reaches(j.from):
			waiting = append(waiting, j)
		case j.resume:
			m.resumeLocked(j.v, j.from)
		default:
			m.registerLocked(j.v)
			j.v.build(&m.st)
			j.v.sendAll(&m.st, m.pos)
			opens.WithLabelValues(openInitial).Inc()
			viewObjects.Observe(float64(j.v.objects()))
		}
	}
	clear(m.joining[len(waiting):])
	m.joining = waiting
}

// replaceLocked answers a resume from a position this replica's change
// logs do not reach (it started after the consumer's last bookmark of a
// type that changed since) with the view afresh, on the same channel:
// its initial state and the bookmark that ends one, which the consumer
// takes as a relist, replacing what it holds (docs/api.md, "The node
// view"). A 410 would have cost the consumer a round trip to the same
// end, and the changes made meanwhile would have gone by in it.
func (m *Views) replaceLocked(v *view, from Position, resource string) {
	klog.InfoS("Resume of a node view from a position this replica's change log does not reach; sending the view afresh",
		"node", v.node, "resource", resource, "position", from.String())
	m.registerLocked(v)
	v.build(&m.st)
	v.sendAll(&m.st, m.pos)
	opens.WithLabelValues(openReplaced).Inc()
	viewObjects.Observe(float64(v.objects()))
}

// resumeLocked builds the view the consumer holds at from (the state of
// every type at from, which the change logs still hold) and sends it the
// changes from there to the hub's position, type by type as a step does:
// the consumer ends where every other view is, having missed nothing and
// been told nothing twice.
func (m *Views) resumeLocked(v *view, from Position) {
	// The consumer holds each type's state at every version from
	// from.Since to from.At; this replica has taken in every change up
	// to m.pos.At, which reaches from.Since. Read at the latest version
	// in both ranges.
	var at Position
	st := state{stores: &m.stores, encoder: m.st.encoder}
	for i := range types {
		at.At[i] = min(from.At[i], m.pos.At[i])
		if !v.types.Has(i) {
			at.At[i] = m.pos.At[i] // the consumer holds none of it
		} else if since := m.stores[i].HeldSince(v.node); since > at.At[i] {
			// A sharded replica that acquired the node's range after the
			// position: the node's objects came in without events, so
			// its state there cannot be rebuilt, as for a position older
			// than the change log.
			klog.V(2).InfoS("Resume of a node view from before this replica held the node", "node", v.node,
				"resource", types[i].gvr.Resource, "heldSince", since, "position", from.String())
			m.replaceLocked(v, from, types[i].gvr.Resource)
			return
		}
		snap, err := m.st.snaps[i].At(at.At[i])
		if err != nil {
			m.replaceLocked(v, from, types[i].gvr.Resource)
			return
		}
		st.snaps[i] = snap
	}
	st.claims = claimsAt(st.snaps[pvIndex])
	m.registerLocked(v)
	v.build(&st)
	v.built = nil // the consumer holds it already
	// The catch-up is bounded by the change logs, not by the channel's
	// queue: a view away for a while must not be refused as too slow for
	// what it missed, as a watch's initial state is not.
	v.initial = true
	defer func() { v.initial = false }()
	for i := range types {
		events, err := m.st.snaps[i].Changes(at.At[i])
		if err != nil {
			m.expireLocked(v, fmt.Sprintf("position %s is older than the hub's change log of %s holds; open the view again without a position", from, types[i].gvr.Resource))
			opens.WithLabelValues(openExpired).Inc()
			return
		}
		for _, e := range events {
			v.apply(i, e, &m.st)
		}
	}
	v.sent++ // a bookmark at once: the consumer's first resume point here
	opens.WithLabelValues(openResumed).Inc()
	viewObjects.Observe(float64(v.objects()))
}

func (m *Views) registerLocked(v *view) {
	v.joined = true
	m.all[v] = struct{}{}
	set := m.byNode[v.node]
	if set == nil {
		set = map[*view]struct{}{}
		m.byNode[v.node] = set
	}
	set[v] = struct{}{}
	openViews.Inc()
}

// reach, setReach and shared keep what views reach (index) in
// m.reached.
func (m *Views) reach(v *view, ref graph.ObjectRef) reach { return m.reached.reach(v, ref) }

func (m *Views) setReach(v *view, ref graph.ObjectRef, r reach) { m.reached.setReach(v, ref, r) }

func (m *Views) shared(ref graph.ObjectRef) bool { return m.reached.isShared(ref) }

// markLocked sends the position to the views that were sent something
// in this step or whose position answers a progress request, or, with
// all, to every view whose last bookmark is older. A bookmark that
// answers carries the token; it closes the batch like any other, so the
// events before it are the change up to the position it names.
func (m *Views) markLocked(all bool) {
	// One for every view of a version: the position is the hub's.
	objs := map[v1alpha1.NodeViewTypeSet][]byte{}
	for v := range m.all {
		if v.dead {
			continue
		}
		token, answers := v.answerable(m.pos)
		if v.sent == 0 && answers == 0 && (!all || v.marked == m.pos) {
			continue
		}
		b := objs[v.types]
		switch {
		case answers > 0:
			b = bookmarkObject(v.positionOf(m.pos), false, token)
		case b == nil:
			b = bookmarkObject(v.positionOf(m.pos), false, "")
			objs[v.types] = b
		}
		if !v.sink.Send(watch.Bookmark, b) {
			v.dead = true
			continue
		}
		v.sent, v.marked = 0, m.pos
		if answers > 0 {
			v.answered(answers)
		}
	}
}

func (m *Views) sweepLocked() {
	dropped := false
	for _, v := range m.gone.take() {
		dropped = m.dropLocked(v) || dropped
	}
	if dropped {
		m.dropReachedLocked()
	}
}

// dropReachedLocked takes the entries of every view dropped since the
// last call out of the index of what views reach: those no longer
// joined. One pass over the index, whatever the number of views gone
// (reachIndex says why views do not list their own entries).
func (m *Views) dropReachedLocked() {
	m.reached.dropViews(func(v *view) bool { return !v.joined })
}

// dropLocked takes v out of every index but the index of what views
// reach (dropReachedLocked), and says whether it was in them.
func (m *Views) dropLocked(v *view) bool {
	v.dead = true
	v.abandonProgress()
	if !v.joined {
		return false
	}
	v.joined = false
	delete(m.all, v)
	if set := m.byNode[v.node]; set != nil {
		delete(set, v)
		if len(set) == 0 {
			delete(m.byNode, v.node)
		}
	}
	openViews.Dec()
	return true
}

func (m *Views) expireLocked(v *view, msg string) {
	if m.dropLocked(v) {
		m.dropReachedLocked()
	}
	closeExpired(v, msg)
}

func closeExpired(v *view, msg string) {
	v.sink.Close(&metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: msg})
}

// expireAllLocked ends every view. With none joined left, the index of
// what views reach starts empty rather than scanned once per view.
func (m *Views) expireAllLocked(msg string) {
	klog.InfoS("Every node view starts again", "reason", msg, "views", len(m.all))
	for v := range m.all {
		m.dropLocked(v)
		closeExpired(v, msg)
	}
	m.reached = newReachIndex()
}

// observeLocked sets the objects gauge, the sum over views being cheap
// next to the step that changed it, and gives back the memory of the
// index's entries gone if most have (reachIndex.compact): pods leave and
// views close a step at a time.
func (m *Views) observeLocked() {
	n := 0
	for v := range m.all {
		n += v.objects()
	}
	heldObjects.Set(float64(n))
	m.reached.compact()
	indexEntries.Set(float64(m.reached.len()))
}
