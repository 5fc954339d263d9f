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
// under it, and reports ErrExpired rather than skip changes. The log
// starts over when the store relists, because a list says nothing of the
// changes between the old state and the new one.
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

// first finds the number of the first change after rv, checking that the
// ring still holds every change after rv among the first seq.
//
// The writer may have appended past seq since the caller took its
// snapshot, overwriting the oldest slots of [oldest(seq), seq): what
// counts is the oldest change still held, found by a search over the
// slots (valid ones form the top of the range; the writer only ever
// overwrites the oldest). Measuring from oldest(seq) instead made every
// reader of a snapshot older than the latest write see ErrExpired once
// the ring was full: each dispatcher then expired all its channels.
func (l *changeLog) first(rv, seq uint64) (uint64, error) {
	lo := l.oldest(seq)
	held := lo + uint64(sort.Search(int(seq-lo), func(k int) bool {
		_, ok := l.event(lo + uint64(k))
		return ok
	}))
	floor := l.startRV
	if held > 0 {
		if held == seq {
			// Every slot overwritten: the caller is a whole ring behind.
			return 0, ErrExpired
		}
		e, ok := l.event(held)
		if !ok {
			return 0, ErrExpired // overwritten meanwhile
		}
		floor = e.PrevRV
	}
	if rv < floor {
		return 0, ErrExpired
	}
	// Changes are in increasing resourceVersion order.
	var readErr error
	n := sort.Search(int(seq-held), func(k int) bool {
		e, ok := l.event(held + uint64(k))
		if !ok {
			readErr = ErrExpired
			return true
		}
		return e.RV > rv
	})
	if readErr != nil {
		return 0, readErr
	}
	return held + uint64(n), nil
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
	if !ok {
		return nil, ErrExpired // the change before i is overwritten
	}
	return e.after, nil
}
