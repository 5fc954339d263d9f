package cache

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/btree"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodeproxy/nodeproxy/shard"
)

// Acquiring ranges: a store starts to hold nodes it did not, without
// breaking its change log (Cache.Hold).
//
//	begin (lock):   ranges pending at the store's version W; their changes
//	                from now on wait in the acquisition's buffer
//	list (no lock): the type from kube-apiserver, consistent, at L >= W,
//	                the pending ranges' objects kept
//	finish (lock):  the list, then the buffered changes after L, taken in
//	                silently (the handlers see them; the log does not);
//	                the ranges held since H = max(L, the store's version,
//	                the buffered changes' versions)
//
// Why it is right: every change of a pending range after W is in the
// buffer (the store's one writer puts it there) and the list shows every
// change up to L, so the list plus the buffered changes after L is the
// state at the store's version, or at L if the watch trails the list.
// Changes of the range that the watch brings later at or below H are in
// that state already, and are dropped (beforeHeld); those after H go to
// the log as any change does. So a reader of the log from H on misses
// nothing and repeats nothing for the range, and a reader from below H
// would see objects appear without an event: HeldSince tells it its
// version is expired there.
//
// A relist of the type while a range is pending (the reflector's watch
// failed) is a newer consistent state of the range: it replaces what the
// buffer held, from its version on (acquisition.relisted), and finish
// takes whichever of the two lists is newer.

// acquisition is the state of ranges being acquired.
type acquisition struct {
	ranges shard.Set
	// from: the buffer holds every change of ranges after it.
	from uint64
	// events are the changes of ranges after from, in order.
	events []buffered
	// base is a relist's objects of ranges, at from, when the type
	// relisted since the acquisition began (relisted).
	base    []*Object
	hasBase bool
}

// buffered is a change waiting for its range's acquisition.
type buffered struct {
	o       *Object
	deleted bool
}

// relisted makes a relist at rv, whose objects of the pending ranges are
// objs, the acquisition's starting point.
func (a *acquisition) relisted(objs []*Object, rv uint64) {
	a.base, a.hasBase, a.from, a.events = objs, true, rv, nil
}

// errListOlder: an acquisition's list is older than the store was when
// it began, and no relist since covers the difference; kube-apiserver's
// consistent lists never are (they read etcd's latest revision).
var errListOlder = errors.New("the list is older than the cache")

// errHeldChangedDuringList: a relist's objects were dropped as they
// streamed in (notWanted) for ranges that the store acquired before the
// list ended. The reflector lists again.
var errHeldChangedDuringList = errors.New("the held ranges changed while the list streamed in; listing again")

// beginAcquire marks ranges pending, and reports false when there is
// nothing to list: a store before its first list just holds them, which
// that list brings.
func (s *Store) beginAcquire(ranges shard.Set) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.holdingLocked()
	if !s.synced.Load() {
		s.setHoldLocked(h.held.Union(ranges), h.since)
		return false
	}
	s.pending = &acquisition{ranges: ranges, from: s.current.Load().RV}
	s.setHoldLocked(h.held, h.since)
	return true
}

// abortAcquire gives up the pending ranges: they stay unheld, and their
// buffered changes go.
func (s *Store) abortAcquire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = nil
	h := s.holdingLocked()
	s.setHoldLocked(h.held, h.since)
}

// prepared is a listed object made ready to keep (prepare), with its
// typed object for the handlers.
type prepared struct {
	o     *Object
	typed runtime.Object
}

// prepare makes the objects of an acquisition's list what the store
// keeps (their bytes, or slimmed) before finishAcquire takes the lock:
// the reflector, which waits for that lock, is not held up by
// encoding a range's pods.
func (s *Store) prepare(list []*Object) map[*Object]runtime.Object {
	out := make(map[*Object]runtime.Object, len(list))
	for _, o := range list {
		out[o] = s.keep(o, nil)
	}
	return out
}

// finishAcquire takes in the pending ranges' objects, listed at listRV
// (list holds only theirs, prepared: their typed objects), and the
// changes buffered since, silently, and holds the ranges from then on.
// It returns the version they are held since (HeldSince).
func (s *Store) finishAcquire(list map[*Object]runtime.Object, listRV uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.pending
	s.pending = nil
	h := s.holdingLocked()
	var base []*Object
	baseRV := listRV
	switch {
	case listRV >= a.from:
		for o := range list {
			base = append(base, o)
		}
	case a.hasBase:
		base, baseRV, list = a.base, a.from, nil // a relist newer than the list
	default:
		s.setHoldLocked(h.held, h.since)
		return 0, fmt.Errorf("%s: list at %d, cache at %d: %w", s.Resource.Resource, listRV, a.from, errListOlder)
	}
	state := btree.NewG(btreeDegree, byKey)
	for _, o := range base {
		state.ReplaceOrInsert(o)
	}
	// The ranges' state is at the latest of the list, the store and the
	// changes buffered (which the reflector reports to the store after
	// each, but need not have).
	since := max(baseRV, s.current.Load().RV)
	for _, e := range a.events {
		since = max(since, e.o.RV)
		switch {
		case e.o.RV <= baseRV: // the list shows it
		case e.deleted:
			state.Delete(e.o)
		default:
			state.ReplaceOrInsert(e.o)
		}
	}
	// The store holds nothing of these ranges yet: verdictLocked turned
	// every object of them away, and holdOnly took out what it held.
	state.Ascend(func(o *Object) bool {
		typed, ok := list[o]
		if !ok {
			typed = s.keep(o, nil) // buffered, or from a relist
		}
		s.insertSilentlyLocked(o, typed)
		return true
	})
	next := *h.since
	for r := range shard.Ranges {
		if a.ranges.Has(r) {
			next[r] = since
		}
	}
	s.setHoldLocked(h.held.Union(a.ranges), &next)
	s.publishLocked(nil)
	return since, nil
}

// insertSilentlyLocked takes o in, kept as the store keeps it (typed
// is its typed object, nil if the handlers must decode it), without a
// change-log event; the handlers (the graph) see it added. The store
// holds nothing of o's range yet, so o has no version before it to
// share with. The store's writer lock is held.
func (s *Store) insertSilentlyLocked(o *Object, typed runtime.Object) {
	prev, exists := s.objects.ReplaceOrInsert(o)
	if s.nodes != nil {
		if exists {
			s.nodes.Delete(prev)
		}
		s.nodes.ReplaceOrInsert(o)
	}
	if len(s.handlers) == 0 {
		return
	}
	typed = s.typedFor(o, typed)
	if exists {
		old := s.typedLocked(prev)
		for _, h := range s.handlers {
			h.OnUpdate(old, typed)
		}
		return
	}
	for _, h := range s.handlers {
		h.OnAdd(typed, false)
	}
}

// holdingLocked is what the store holds, every range for a store that
// held everything so far. The store's writer lock is held.
func (s *Store) holdingLocked() *holding {
	if h := s.hold.Load(); h != nil {
		return h
	}
	return &holding{held: shard.All(), wanted: shard.All(), since: new([shard.Ranges]uint64)}
}

// notAdmittedLocked handles a change verdictLocked did not admit. The
// store's writer lock is held.
func (s *Store) notAdmittedLocked(v verdict, o *Object, deleted bool, start time.Time) error {
	s.metrics.filtered[v].Inc()
	switch v {
	case pending:
		s.pending.events = append(s.pending.events, buffered{o: o, deleted: deleted})
	case outOfShard, unbound:
		// Held before, and now of a node not held: it leaves, as it
		// leaves a watch whose field selector it no longer matches.
		// (Pods and volume attachments never change node; a slice
		// might.)
		if _, held := s.objects.Get(o); held && !deleted {
			return s.deleteLocked(o, start)
		}
	}
	return nil
}

// heldOfListLocked is what the store holds of a list at listRV: its
// trees, and, with ranges pending, their objects for the acquisition.
// The store's writer lock is held.
func (s *Store) heldOfListLocked(listed []*Object, listRV uint64) (objects, nodes *btree.BTreeG[*Object], err error) {
	objects = btree.NewG(btreeDegree, byKey)
	if s.nodes != nil {
		nodes = btree.NewG(btreeDegree, byNode)
	}
	var acquiring []*Object
	for _, o := range listed {
		v := s.verdictLocked(o, true)
		if (v == admit || v == pending) && o.dropped() {
			return nil, nil, errHeldChangedDuringList
		}
		switch v {
		case admit:
			objects.ReplaceOrInsert(o)
			if nodes != nil {
				nodes.ReplaceOrInsert(o)
			}
		case pending:
			acquiring = append(acquiring, o)
		default:
			s.metrics.filtered[v].Inc()
		}
	}
	if s.pending != nil {
		s.pending.relisted(acquiring, listRV)
	}
	return objects, nodes, nil
}
