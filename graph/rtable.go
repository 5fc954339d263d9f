package graph

import (
	"hash/maphash"
	"sync/atomic"
)

// rtable is an open-addressing hash table of pointers that one writer
// changes and any number of readers read without taking a lock. It exists
// because a lock readers hold, however briefly, is a lock a reader can be
// preempted while holding: with thousands of runnable reader goroutines
// such a reader may not run again for seconds, and a writer waiting for it
// waits as long. Here a reader holds nothing; a writer never waits.
//
// Slots hold *V or the table's tombstone, beside a 32-bit tag from the
// key's hash. The writer (the caller holds Graph.mu) stores the tag, then
// the pointer; a reader loads the pointer, then the tag, so a tag it sees
// is never older than the pointer beside it. A probe whose tag differs is
// skipped without touching the entry: each entry touched is a cache miss,
// and without tags the unlucky keys at the end of long probe sequences
// took 300 ns instead of 150 (BenchmarkAuthorization).
//
// Growing builds new arrays and swaps them in: a reader still probing the
// old ones sees a frozen, consistent table whose entries are the same
// objects the new one holds. Entries are never changed in place except
// through their own atomic fields.
//
// Probing is triangular (offsets 1, 3, 6, 10, ...), which in a
// power-of-two table visits every slot and does not grow the long runs of
// linear probing.
//
// Memory: 12 bytes per slot at a load of at most 3/4, about 20 bytes per
// entry on top of the entry itself; a Go map costs 50-60.
type rtable[K comparable, V any] struct {
	slots atomic.Pointer[rslots[V]]
	key   func(*V) K
	seed  maphash.Seed
	tomb  *V
	live  int // entries; writer only
	used  int // entries and tombstones; writer only
}

type rslots[V any] struct {
	ptrs []atomic.Pointer[V]
	tags []atomic.Uint32
	mask uint64
}

const rtableMinSize = 64

func newRTable[K comparable, V any](key func(*V) K) *rtable[K, V] {
	t := &rtable[K, V]{key: key, seed: maphash.MakeSeed(), tomb: new(V)}
	t.slots.Store(newRSlots[V](rtableMinSize))
	return t
}

func newRSlots[V any](size int) *rslots[V] {
	return &rslots[V]{ptrs: make([]atomic.Pointer[V], size), tags: make([]atomic.Uint32, size), mask: uint64(size - 1)}
}

// hash returns the first slot and the tag of k. Tags are never 0, so a
// slot never written cannot match.
func (t *rtable[K, V]) hash(k K) (uint64, uint32) {
	h := maphash.Comparable(t.seed, k)
	return h, uint32(h>>32) | 1
}

// get returns the entry of k, or nil. Lock-free.
func (t *rtable[K, V]) get(k K) *V {
	s := t.slots.Load()
	h, tag := t.hash(k)
	i := h & s.mask
	for step := uint64(1); ; step++ {
		p := s.ptrs[i].Load()
		if p == nil {
			return nil
		}
		if p != t.tomb && s.tags[i].Load() == tag && t.key(p) == k {
			return p
		}
		i = (i + step) & s.mask
	}
}

// insert adds v, whose key must not be in the table. Writer only.
func (t *rtable[K, V]) insert(v *V) {
	if 4*(t.used+1) > 3*len(t.slots.Load().ptrs) {
		t.grow()
	}
	s := t.slots.Load()
	h, tag := t.hash(t.key(v))
	i := h & s.mask
	for step := uint64(1); ; step++ {
		p := s.ptrs[i].Load()
		if p == nil {
			t.used++
			break
		}
		if p == t.tomb {
			break // reuse; used already counts it
		}
		i = (i + step) & s.mask
	}
	s.tags[i].Store(tag)
	s.ptrs[i].Store(v)
	t.live++
}

// remove takes v out of the table. Writer only.
func (t *rtable[K, V]) remove(v *V) {
	s := t.slots.Load()
	h, _ := t.hash(t.key(v))
	i := h & s.mask
	for step := uint64(1); ; step++ {
		p := s.ptrs[i].Load()
		if p == nil {
			return
		}
		if p == v {
			s.ptrs[i].Store(t.tomb)
			t.live--
			return
		}
		i = (i + step) & s.mask
	}
}

// grow rehashes into arrays at most half full, dropping tombstones, and
// publishes them. Readers of the old arrays finish on them.
func (t *rtable[K, V]) grow() {
	size := rtableMinSize
	for size < 2*(t.live+1) {
		size *= 2
	}
	old := t.slots.Load()
	s := newRSlots[V](size)
	for j := range old.ptrs {
		p := old.ptrs[j].Load()
		if p == nil || p == t.tomb {
			continue
		}
		h, tag := t.hash(t.key(p))
		i := h & s.mask
		for step := uint64(1); s.ptrs[i].Load() != nil; step++ {
			i = (i + step) & s.mask
		}
		s.tags[i].Store(tag)
		s.ptrs[i].Store(p)
	}
	t.used = t.live
	t.slots.Store(s)
}

// len is the number of entries. Writer only.
func (t *rtable[K, V]) len() int { return t.live }
