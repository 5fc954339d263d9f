package cache

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// btreeDegree is the fan-out of the object trees, the value kube-apiserver's
// watch cache uses: nodes of up to 63 pointers keep a 100k-object tree
// three levels deep, so a change copies about 3 KiB when a snapshot shares
// the old nodes.
const btreeDegree = 32

// Store is the cache of one resource type: the current objects, published
// as immutable snapshots, and a bounded log of the latest changes.
//
// One writer (the type's reflector) calls Add, Update, Delete, Replace and
// Bookmark; they hold mu, which no reader ever takes. Readers load the
// current Snapshot with one atomic read. This is on purpose: the writer
// also feeds the authorization graph, and a reader preempted while holding
// a read lock would hold graph updates back with it (docs/architecture.md,
// "The graph", has what an RWMutex cost the graph's writes).
//
// Before a change becomes visible to readers, the store hands it to its
// handlers (the graph's), in the order the changes arrive. So whoever saw
// a pod in a snapshot finds the graph already knows it.
type Store struct {
	Resource   schema.GroupVersionResource
	Kind       string
	Namespaced bool

	mu       sync.Mutex
	handlers []toolscache.ResourceEventHandler // guarded by mu
	objects  *btree.BTreeG[*Object]            // guarded by mu; the writer's copy
	nodes    *btree.BTreeG[*Object]            // guarded by mu; pods only
	log      *changeLog                        // guarded by mu
	seq      uint64                            // guarded by mu: changes in log
	logSize  int
	// restartLogOnRelist: see Options.RestartLogOnRelist.
	restartLogOnRelist bool
	// asBytes: the store keeps its objects as bytes (keptAsBytes), with
	// apiVersion and Kind on their envelope.
	asBytes    bool
	layout     cuts
	apiVersion string

	// nodeOf names the node of an object of a per-node type (held.go);
	// nil for the types every replica holds whole.
	nodeOf nodeOfFunc
	// hold is what a sharded store holds; nil: everything.
	hold atomic.Pointer[holding]
	// pending is the acquisition under way (hold.go), or nil.
	pending *acquisition // guarded by mu

	current atomic.Pointer[Snapshot]
	synced  atomic.Bool
	metrics storeMetrics
	fresh   freshness
}

func newStore(r resource, logSize int) *Store {
	RegisterMetrics()
	layout, asBytes := keptAsBytes[r.gvr]
	s := &Store{
		asBytes:    asBytes,
		Resource:   r.gvr,
		Kind:       r.kind,
		Namespaced: r.namespaced,
		objects:    btree.NewG(btreeDegree, byKey),
		logSize:    logSize,
		metrics:    newStoreMetrics(r.gvr.Resource),
		layout:     layout,
		apiVersion: r.gvr.GroupVersion().String(),
		nodeOf:     nodeOf[r.gvr],
	}
	if r.byNode {
		s.nodes = btree.NewG(btreeDegree, byNode)
	}
	empty := &Snapshot{objects: s.objects.Clone(), next: make(chan struct{})}
	if s.nodes != nil {
		empty.nodes = s.nodes.Clone()
	}
	s.log = newChangeLog(logSize, empty)
	empty.log = s.log
	s.current.Store(empty)
	return s
}

// Snapshot returns the current state. Before HasSynced it is empty.
func (s *Store) Snapshot() *Snapshot { return s.current.Load() }

// Await returns the first state at rv or later, waiting for it until ctx
// ends; then it returns the state it last saw with ctx's error. The
// store runs its handlers (the graph) before it publishes, so they have
// applied every change up to rv too.
func (s *Store) Await(ctx context.Context, rv uint64) (*Snapshot, error) {
	for {
		snap := s.Snapshot()
		if snap.RV >= rv {
			return snap, nil
		}
		select {
		case <-snap.Next():
		case <-ctx.Done():
			return snap, ctx.Err()
		}
	}
}

// Freshness says how current the store is, as of now.
func (s *Store) Freshness(now time.Time) Freshness { return s.fresh.at(s.Resource.Resource, now) }

// HeardWithin reports whether the store is current enough to stand in
// for kube-apiserver at now: it has taken in its first list, its lists
// and watches succeed, and it heard from kube-apiserver (an event, a
// bookmark: a working watch gets one about every minute) within d. d 0
// (or less) trusts it never.
func (s *Store) HeardWithin(now time.Time, d time.Duration) bool {
	if d <= 0 || !s.HasSynced() {
		return false
	}
	f := s.Freshness(now)
	return f.Outage == 0 && f.Heard && f.SinceHeard <= d
}

// HasSynced reports whether the store has taken in its first list.
func (s *Store) HasSynced() bool { return s.synced.Load() }

// AddHandler makes h see every change before readers do. Call it before
// the cache starts.
func (s *Store) AddHandler(h toolscache.ResourceEventHandler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handlers = append(s.handlers, h)
}

// Add takes in an object the reflector saw created.
func (s *Store) Add(obj interface{}) error { return s.upsert(obj) }

// Update takes in an object the reflector saw changed.
func (s *Store) Update(obj interface{}) error { return s.upsert(obj) }

func (s *Store) upsert(obj interface{}) error {
	o, err := newObject(obj)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Resource.Resource, err)
	}
	start := time.Now()
	s.fresh.heardAt(start)
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.verdictLocked(o, false); v != admit {
		return s.notAdmittedLocked(v, o, false, start)
	}
	prev, _ := s.objects.Get(o)
	typed := s.keep(o, prev) // before the handlers, so that the graph keeps no part of o that prev has too
	prev, exists := s.objects.ReplaceOrInsert(o)
	if s.nodes != nil {
		if exists && prev.NodeName != o.NodeName {
			s.nodes.Delete(prev)
		}
		s.nodes.ReplaceOrInsert(o)
	}
	e := &Event{Type: watch.Added, Object: o}
	if exists {
		e.Type, e.Prev = watch.Modified, prev
		old := s.typedLocked(prev)
		for _, h := range s.handlers {
			h.OnUpdate(old, typed)
		}
	} else {
		for _, h := range s.handlers {
			h.OnAdd(typed, false)
		}
	}
	s.publishLocked(e)
	s.metrics.observeWrite(e.Type, start)
	return nil
}

// Delete takes in an object the reflector saw deleted, in its last state.
func (s *Store) Delete(obj interface{}) error {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	o, err := newObject(obj)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Resource.Resource, err)
	}
	start := time.Now()
	s.fresh.heardAt(start)
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.verdictLocked(o, false); v != admit {
		return s.notAdmittedLocked(v, o, true, start)
	}
	return s.deleteLocked(o, start)
}

// deleteLocked takes o's deletion in. The store's writer lock is held.
func (s *Store) deleteLocked(o *Object, start time.Time) error {
	prev, exists := s.objects.Delete(o)
	if !exists {
		return nil // never seen, or already gone with a relist
	}
	typed := s.keep(o, prev) // the last state the log keeps is mostly prev's
	if s.nodes != nil {
		s.nodes.Delete(prev)
	}
	for _, h := range s.handlers {
		h.OnDelete(typed)
	}
	s.publishLocked(&Event{Type: watch.Deleted, Object: o, Prev: prev})
	s.metrics.observeWrite(watch.Deleted, start)
	return nil
}

// publishLocked appends e (if any) to the log and makes the writer's
// state the current snapshot.
func (s *Store) publishLocked(e *Event) {
	prev := s.current.Load()
	next := &Snapshot{
		RV:      prev.RV,
		objects: s.objects.Clone(),
		log:     s.log,
		seq:     s.seq,
		next:    make(chan struct{}),
	}
	if s.nodes != nil {
		next.nodes = s.nodes.Clone()
	}
	if e != nil {
		e.PrevRV = prev.RV
		e.RV = max(e.Object.RV, prev.RV)
		if (s.seq+1)%checkpointEvery == 0 {
			e.after = next
		}
		next.RV = e.RV
		s.log.appendLocked(e, s.seq)
		s.seq++
		next.seq = s.seq
	}
	s.current.Store(next)
	close(prev.next)
	s.metrics.objects.Set(float64(s.objects.Len()))
}

// Replace takes in a full list at resourceVersion rv, after the reflector
// (re)listed. Handlers see the difference to the old state as adds,
// updates and deletes. After the first list, the same difference goes
// into the change log as ordinary events up to rv (relistChanges), so a
// watch from before the relist carries on and ends at a state equal to
// the list. Where that cannot be done honestly, and at the first list,
// the change log starts over at rv, and a watch from an older
// resourceVersion gets ErrExpired and relists, as from kube-apiserver
// after a compaction.
func (s *Store) Replace(list []interface{}, rv string) error {
	s.fresh.heardAt(time.Now())
	listRV, err := parseRV(rv)
	if err != nil {
		return fmt.Errorf("%s list: %w", s.Resource.Resource, err)
	}
	listed := make([]*Object, 0, len(list))
	for _, item := range list {
		o, err := objectOf(item)
		if err != nil {
			return fmt.Errorf("%s list: %w", s.Resource.Resource, err)
		}
		listed = append(listed, o)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	// What the store holds is decided under the lock, which Hold takes
	// to change it: no list is taken in against a set of ranges that
	// has gone.
	objects, nodes, err := s.heldOfListLocked(listed, listRV)
	if err != nil {
		return fmt.Errorf("%s list: %w", s.Resource.Resource, err)
	}
	initial := !s.synced.Load()
	objects.Ascend(func(o *Object) bool {
		prev, ok := s.objects.Get(o)
		typed := s.keep(o, prev) // an object listed at the version held is prev's all over
		switch {
		case len(s.handlers) == 0:
		case !ok:
			typed = s.typedFor(o, typed)
			for _, h := range s.handlers {
				h.OnAdd(typed, initial)
			}
		case prev.RV != o.RV:
			old, typed := s.typedLocked(prev), s.typedFor(o, typed)
			for _, h := range s.handlers {
				h.OnUpdate(old, typed)
			}
		}
		return true
	})
	s.objects.Ascend(func(prev *Object) bool {
		if _, ok := objects.Get(prev); !ok {
			old := s.typedLocked(prev)
			for _, h := range s.handlers {
				h.OnDelete(old)
			}
		}
		return true
	})
	old := s.current.Load()
	if !initial {
		r, reason := relist{}, restartOption
		if !s.restartLogOnRelist {
			r, reason = relistChanges(s.objects, objects, old.RV, listRV, s.layout)
		}
		if reason == "" {
			s.objects, s.nodes = objects, nodes
			s.appendRelistLocked(r.changes, listRV)
			s.metrics.objects.Set(float64(objects.Len()))
			s.metrics.relists.Inc()
			s.metrics.carriedOver.Inc()
			s.metrics.observeRelistDeletions(r)
			klog.V(2).InfoS("Cache relisted; watches carry on", "resource", s.Resource.Resource, "objects", objects.Len(),
				"changes", len(r.changes), "gone", r.deletions[0][0]+r.deletions[0][1], "namesReused", r.deletions[1][0]+r.deletions[1][1],
				"deletionsSharingAVersion", r.deletions[0][1]+r.deletions[1][1], "resourceVersion", listRV)
			return nil
		}
		s.metrics.logRestarts.WithLabelValues(s.Resource.Resource, reason).Inc()
		klog.V(2).InfoS("Cache relisted; its change log starts over", "resource", s.Resource.Resource, "reason", reason,
			"resourceVersion", old.RV, "listResourceVersion", listRV)
	}
	s.objects, s.nodes = objects, nodes
	next := &Snapshot{RV: listRV, objects: objects.Clone(), next: make(chan struct{})}
	if nodes != nil {
		next.nodes = nodes.Clone()
	}
	s.log, s.seq = newChangeLog(s.logSize, next), 0
	next.log = s.log
	s.current.Store(next)
	close(old.next)
	s.synced.Store(true)
	s.metrics.objects.Set(float64(objects.Len()))
	s.metrics.relists.Inc()
	klog.V(2).InfoS("Cache relisted", "resource", s.Resource.Resource, "objects", objects.Len(), "resourceVersion", listRV, "initial", initial)
	return nil
}

// Bookmark moves the store's resourceVersion forward without a change:
// kube-apiserver says nothing of this type changed up to rv. A watch or
// list at rv can then be served without waiting for an unrelated change.
func (s *Store) Bookmark(rv string) error {
	s.fresh.heardAt(time.Now())
	v, err := parseRV(rv)
	if err != nil {
		return fmt.Errorf("%s bookmark: %w", s.Resource.Resource, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.current.Load()
	if v <= prev.RV {
		return nil
	}
	next := *prev
	next.RV = v
	next.next = make(chan struct{})
	s.current.Store(&next)
	close(prev.next)
	return nil
}

// UpdateResourceVersion is how the reflector reports the version it has
// reached after each watch event; for bookmarks it is the same as
// Bookmark.
func (s *Store) UpdateResourceVersion(rv string) { _ = s.Bookmark(rv) }

// Resync is part of the reflector's store interface; nodeproxy never
// resyncs.
func (s *Store) Resync() error { return nil }
