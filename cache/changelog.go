package cache

import (
	"errors"
	"sort"
	"sync/atomic"

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
	// [PrevRV, RV) must deliver this event.
	RV, PrevRV uint64

	seq uint64
	// after is the store's state right after this change.
	after *Snapshot
}

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
}

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
// before rv. Only called for rv older than the caller's snapshot, so a
// change after rv exists among the first seq.
func (l *changeLog) at(rv, seq uint64) (*Snapshot, error) {
	i, err := l.first(rv, seq)
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
	if !ok || e.after == nil {
		// The change before i is overwritten, or is inside a relist's
		// batch, whose states in between nobody can vouch for.
		return nil, ErrExpired
	}
	return e.after, nil
}
