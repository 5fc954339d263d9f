package cache

import (
	"errors"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/google/btree"
	"k8s.io/apimachinery/pkg/watch"
)

// ErrExpired is returned for a resourceVersion older than a store's
// change log holds. kube-apiserver answers the same case with 410 Gone
// (reason Expired), and clients relist.
var ErrExpired = errors.New("resourceVersion is too old")

// Event is one change to one object, as a watch delivers it.
type Event struct {
	Type watch.EventType
	// Object is the new state; for Deleted, the last state with the
	// resourceVersion of the deletion.
	Object *Object
	// Prev is the state before the change; nil for Added. A watch with a
	// selector needs it to turn a change that leaves the selector into
	// DELETED, as kube-apiserver does.
	Prev *Object
	// RV is the change's resourceVersion; PrevRV the store's
	// resourceVersion just before it. A watch from any version in
	// [PrevRV, RV) must deliver this event. Inside a relist's batch,
	// deletions the versions do not cover share one version (PrevRV ==
	// RV for all but the first): none is a resume point (inGap).
	RV, PrevRV uint64

	seq uint64
	// after is the store's state right after this change, kept for one
	// change in checkpointEvery (and for the last of a relist's batch):
	// at rebuilds the others from the next kept one. Each kept state
	// holds the tree nodes its change copied, a few KiB a change.
	after *Snapshot
	// partial marks a change inside a relist's batch: no state after it
	// is one anybody can vouch for, and at refuses it.
	partial bool
}

// checkpointEvery is how often a change keeps the state after it: at
// undoes at most checkpointEvery-1 changes to answer a version between
// two (go test ./cache -bench At has what it costs), and the log holds
// 1/checkpointEvery of the tree nodes the changes copied.
// docs/benchmarks.md ("The cache's history") has the figures.
const checkpointEvery = 16

// cloneMu serializes the clones of a snapshot's trees that at takes to
// rebuild a state: google/btree's Clone writes the tree it clones (its
// copy-on-write context), and many readers may rebuild from one snapshot
// at once. Readers of the trees read no field Clone writes.
var cloneMu sync.Mutex

// changeLog is a bounded ring of a store's latest changes, appended by the
// store's single writer and read by any number of readers without locks.
//
// A slot holds an immutable *Event; a reader that finds in a slot an event
// with a later sequence number than it asked for knows the ring wrapped
// under it, and reports ErrExpired rather than skip changes. A relist
// appends the difference between the old state and the list as changes
// (relistChanges); the log starts over only where no honest sequence of
// changes leads from one to the other.
type changeLog struct {
	slots []atomic.Pointer[Event]
	// startRV is the resourceVersion the log starts from: the list it
	// began with.
	startRV uint64
	// start is the state at startRV, kept until the ring wraps (after
	// that no reader can be at startRV any more). Continue tokens of a
	// list taken right after a relist need it.
	start atomic.Pointer[Snapshot]
	// gaps are the relists the log carried on over (relistChanges),
	// copied on write by the writer: the versions strictly inside one
	// are no resume points (see inGap).
	gaps atomic.Pointer[[]gap]
}

// gap is a relist's span: the store was at from, the list at to, and
// what happened in between the store knows only as the list's outcome.
type gap struct{ from, to uint64 }

func newChangeLog(size int, start *Snapshot) *changeLog {
	l := &changeLog{slots: make([]atomic.Pointer[Event], size), startRV: start.RV}
	l.start.Store(start)
	return l
}

// appendLocked stores e as change number seq. The store's writer lock is
// held.
func (l *changeLog) appendLocked(e *Event, seq uint64) {
	e.seq = seq
	if seq == uint64(len(l.slots)) {
		// Change 0 is about to be overwritten: the start state is out
		// of reach, and keeping it would keep every object version
		// replaced since.
		l.start.Store(nil)
	}
	l.slots[seq%uint64(len(l.slots))].Store(e)
}

// addGapLocked records a relist from the store's version from to the
// list's, before its changes are appended, so that a reader that sees
// one of them sees the gap too. Gaps the ring has passed are dropped: a
// version under its oldest change's PrevRV is expired anyway. The
// store's writer lock is held.
func (l *changeLog) addGapLocked(from, to, seq uint64) {
	if to-from < 2 {
		return // no version strictly inside
	}
	var floor uint64
	if e, ok := l.event(l.oldest(seq)); ok {
		floor = e.PrevRV
	}
	var gaps []gap
	if old := l.gaps.Load(); old != nil {
		for _, g := range *old {
			if g.to > floor {
				gaps = append(gaps, g)
			}
		}
	}
	gaps = append(gaps, gap{from, to})
	l.gaps.Store(&gaps)
}

// inGap reports whether rv is strictly inside a relist's span. Such a
// version is no resume point, whoever holds it. A client of another
// replica that saw version rv there may have seen an object created and
// not yet deleted, which this store's relist neither listed nor had
// before (so no DELETED ever comes for it), or the real deletion of an
// object whose DELETED this store stamped with a made-up version at or
// below rv (so it would be skipped): resuming would lose a change
// silently. The trade-off: this replica's own clients that stopped in
// the middle of a relist's batch get ErrExpired too (a channel naming one
// object gets its current state instead; others relist), which costs a
// list in a window of milliseconds after a rare event, never a lost
// change.
func (l *changeLog) inGap(rv uint64) bool {
	gaps := l.gaps.Load()
	if gaps == nil {
		return false
	}
	for _, g := range *gaps {
		if g.from < rv && rv < g.to {
			return true
		}
	}
	return false
}

// event returns change number i, or false if the ring has overwritten it.
func (l *changeLog) event(i uint64) (*Event, bool) {
	e := l.slots[i%uint64(len(l.slots))].Load()
	return e, e != nil && e.seq == i
}

// oldest is the first change number still in the ring, given seq changes.
func (l *changeLog) oldest(seq uint64) uint64 {
	if n := uint64(len(l.slots)); seq > n {
		return seq - n
	}
	return 0
}

// since returns the changes after rv among the first seq.
func (l *changeLog) since(rv, seq uint64) ([]*Event, error) {
	lo, err := l.first(rv, seq)
	if err != nil {
		return nil, err
	}
	out := make([]*Event, 0, seq-lo)
	for i := lo; i < seq; i++ {
		e, ok := l.event(i)
		if !ok {
			return nil, ErrExpired
		}
		out = append(out, e)
	}
	return out, nil
}

// first finds the number of the first change after rv among the first
// seq, checking that the ring still holds every change after rv.
//
// The writer keeps appending while readers read, overwriting the oldest
// slots, so the search never anchors at the bottom of the ring (which may
// go at any moment): it looks for the first held change after rv, counting
// overwritten slots as older than rv, then proves nothing between rv and
// that change was lost. Anchoring at the oldest slot made every reader see
// ErrExpired whenever the writer was busy, and each bulk watch dispatcher
// then expired all its channels.
func (l *changeLog) first(rv, seq uint64) (uint64, error) {
	if l.inGap(rv) {
		return 0, ErrExpired
	}
	lo := l.oldest(seq)
	// A slot, once overwritten, stays so: the predicate only ever turns
	// from true to false under the search, at the bottom, which is the
	// case the checks below catch.
	i := lo + uint64(sort.Search(int(seq-lo), func(k int) bool {
		e, ok := l.event(lo + uint64(k))
		return ok && e.RV > rv
	}))
	if i == 0 {
		// Every change is after rv: rv must not predate the log.
		if rv < l.startRV {
			return 0, ErrExpired
		}
		return 0, nil
	}
	if _, ok := l.event(i - 1); ok {
		return i, nil // held, so at or before rv: nothing in between
	}
	// The change before i is overwritten. Nothing was lost if the store
	// was already at rv or past it when change i came.
	if i < seq {
		if e, ok := l.event(i); ok && rv >= e.PrevRV {
			return i, nil
		}
	}
	return 0, ErrExpired
}

// at returns the state at rv: the snapshot after the last change at or
// before rv. Only called for rv older than s, the caller's snapshot, so a
// change after rv exists among s's.
func (l *changeLog) at(rv uint64, s *Snapshot) (*Snapshot, error) {
	i, err := l.first(rv, s.seq)
	if err != nil {
		return nil, err
	}
	if i == 0 {
		// No change at or before rv: the state at rv is the list the
		// log began with.
		if s := l.start.Load(); s != nil {
			return s, nil
		}
		return nil, ErrExpired
	}
	e, ok := l.event(i - 1)
	if !ok || e.partial {
		// The change before i is overwritten, or is inside a relist's
		// batch, whose states in between nobody can vouch for.
		return nil, ErrExpired
	}
	if e.after != nil {
		return e.after, nil
	}
	return l.rebuild(e, i, s)
}

// rebuild returns the state after change number i-1, e, which kept none:
// the next state kept after it (or s), with the changes from number i up
// to that one undone, newest first. Each change's Prev is the object's
// state before it, so undoing is exact.
func (l *changeLog) rebuild(e *Event, i uint64, s *Snapshot) (*Snapshot, error) {
	base := s
	var undo []*Event
	for j := i; j < s.seq; j++ {
		c, ok := l.event(j)
		if !ok {
			return nil, ErrExpired // the ring wrapped under this reader
		}
		undo = append(undo, c)
		if c.after != nil {
			base = c.after
			break
		}
	}
	cloneMu.Lock()
	objects := base.objects.Clone()
	var nodes *btree.BTreeG[*Object]
	if base.nodes != nil {
		nodes = base.nodes.Clone()
	}
	cloneMu.Unlock()
	for k := len(undo) - 1; k >= 0; k-- {
		c := undo[k]
		switch c.Type {
		case watch.Added:
			objects.Delete(c.Object)
		default: // Modified, Deleted: the object was Prev
			objects.ReplaceOrInsert(c.Prev)
		}
		if nodes != nil {
			nodes.Delete(c.Object)
			if c.Type != watch.Added {
				nodes.ReplaceOrInsert(c.Prev)
			}
		}
	}
	newer := make(chan struct{})
	close(newer) // a newer state exists: s
	return &Snapshot{RV: e.RV, objects: objects, nodes: nodes, log: l, seq: i, next: newer}, nil
}
