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
// Slots hold *V or the table's tombstone. The writer (the caller holds
// Graph.mu) stores pointers atomically; readers load them. Growing builds
// a new slot array and swaps it in: a reader still probing the old array
// sees a frozen, consistent table whose entries are the same objects the
// new one holds. Entries are never changed in place except through their
// own atomic fields.
//
// Probing is triangular (offsets 1, 3, 6, 10, ...), which in a
// power-of-two table visits every slot and, unlike linear probing, does
// not grow long runs: each probe that misses costs a cache miss on the
// entry's key, so run length is what lookups pay for.
//
// Memory: one pointer per slot at a load of at most 3/4, about 12-16
// bytes per entry on top of the entry itself; a Go map costs 50-60.
type rtable[K comparable, V any] struct {
	slots atomic.Pointer[[]atomic.Pointer[V]]
	key   func(*V) K
	seed  maphash.Seed
	tomb  *V
	live  int // entries; writer only
	used  int // entries and tombstones; writer only
}

const rtableMinSize = 64

func newRTable[K comparable, V any](key func(*V) K) *rtable[K, V] {
	t := &rtable[K, V]{key: key, seed: maphash.MakeSeed(), tomb: new(V)}
	s := make([]atomic.Pointer[V], rtableMinSize)
	t.slots.Store(&s)
	return t
}

// get returns the entry of k, or nil. Lock-free.
func (t *rtable[K, V]) get(k K) *V {
	s := *t.slots.Load()
	mask := uint64(len(s) - 1)
	i := maphash.Comparable(t.seed, k) & mask
	for step := uint64(1); ; step++ {
		p := s[i].Load()
		if p == nil {
			return nil
		}
		if p != t.tomb && t.key(p) == k {
			return p
		}
		i = (i + step) & mask
	}
}

// insert adds v, whose key must not be in the table. Writer only.
func (t *rtable[K, V]) insert(v *V) {
	if 4*(t.used+1) > 3*len(*t.slots.Load()) {
		t.grow()
	}
	s := *t.slots.Load()
	mask := uint64(len(s) - 1)
	i := maphash.Comparable(t.seed, t.key(v)) & mask
	for step := uint64(1); ; step++ {
		p := s[i].Load()
		if p == nil {
			t.used++
			break
		}
		if p == t.tomb {
			break // reuse; used already counts it
		}
		i = (i + step) & mask
	}
	s[i].Store(v)
	t.live++
}

// remove takes v out of the table. Writer only.
func (t *rtable[K, V]) remove(v *V) {
	s := *t.slots.Load()
	mask := uint64(len(s) - 1)
	i := maphash.Comparable(t.seed, t.key(v)) & mask
	for step := uint64(1); ; step++ {
		p := s[i].Load()
		if p == nil {
			return
		}
		if p == v {
			s[i].Store(t.tomb)
			t.live--
			return
		}
		i = (i + step) & mask
	}
}

// grow rehashes into an array at most half full, dropping
// tombstones, and publishes it. Readers of the old array finish on it.
func (t *rtable[K, V]) grow() {
	size := rtableMinSize
	for size < 2*(t.live+1) {
		size *= 2
	}
	old := *t.slots.Load()
	s := make([]atomic.Pointer[V], size)
	mask := uint64(size - 1)
	for j := range old {
		p := old[j].Load()
		if p == nil || p == t.tomb {
			continue
		}
		i := maphash.Comparable(t.seed, t.key(p)) & mask
		for step := uint64(1); s[i].Load() != nil; step++ {
			i = (i + step) & mask
		}
		s[i].Store(p)
	}
	t.used = t.live
	t.slots.Store(&s)
}

// len is the number of entries. Writer only.
func (t *rtable[K, V]) len() int { return t.live }
