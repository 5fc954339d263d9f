package graph

import (
	"math/bits"
	"slices"
	"sync/atomic"
)

// multiReach is the reachability of an object that several nodes reach:
// the set of their ids for readers, and for the writer the path counts.
// A member has at least one path; only the paths beyond the first are
// counted, in extra, so that the common case (one pod per node uses the
// object, as a DaemonSet's do) costs nothing beyond the set.
type multiReach struct {
	e     *entry
	set   atomic.Pointer[nodeSet]
	n     int32            // members; writer only
	extra map[uint32]int32 // paths beyond the first, by member; nil when none; writer only
}

// nodeSet is a set of node ids in one of two forms, chosen by which is
// smaller, so that a set of k members costs O(k) whatever the highest id:
//
//   - sorted: an immutable sorted slice of ids, 4 bytes a member, searched
//     by bisection, with the changes made since it was built beside it:
//     a change copies those, not the set, and the set is rebuilt once they
//     outnumber the square root of twice its size. A change then costs
//     O(sqrt k) rather than O(k).
//   - bitmap: a bit per id up to the highest member, 1/8 byte per id. The
//     writer flips bits in place with atomic operations, and publishes a
//     copy only to grow it or to change form.
//
// The bitmap is taken once the sorted form would be larger (more than two
// members per 64 ids) and left once it is less than half full of what the
// sorted form would cost (fewer than one member per 64 ids), so that a
// set at the boundary does not change form on every write. Either way
// the ids cost at most about 8 bytes a member, beside a hundred-odd bytes
// of structure (docs/benchmarks.md, "The graph's shared sets").
//
// Readers take no lock: they load the set once and answer from it. A
// published sorted form never changes; a bitmap changes only through its
// words' atomics, one bit per write.
type nodeSet struct {
	ids     []uint32        // sorted form: the members when it was built
	changes []uint64        // sorted form: changes since, as change(id, removed); sorted
	bits    []atomic.Uint64 // bitmap form; nil in sorted form
}

// change encodes a change to a sorted form: id added (not in it) or
// removed (in it). Sorting the encoded changes sorts them by id, so one
// bisection finds an id's change.
func change(id uint32, removed bool) uint64 {
	c := uint64(id) << 1
	if removed {
		c |= 1
	}
	return c
}

// has reports whether id is in the set. Lock-free, allocation-free.
func (s *nodeSet) has(id uint32) bool {
	if s.bits != nil {
		return s.bitmapHas(id)
	}
	return s.sortedHas(id)
}

// bitmapHas is has for the bitmap form, small enough for Reachable to
// inline: the sets every node reaches are bitmaps, and the most asked
// about.
func (s *nodeSet) bitmapHas(id uint32) bool {
	w := int(id / 64)
	return w < len(s.bits) && s.bits[w].Load()&(1<<(id%64)) != 0
}

func (s *nodeSet) sortedHas(id uint32) bool {
	if i := search(s.changes, change(id, false)); i < len(s.changes) && s.changes[i]>>1 == uint64(id) {
		return s.changes[i]&1 == 0
	}
	i := search(s.ids, id)
	return i < len(s.ids) && s.ids[i] == id
}

// search returns the index of the first element of sorted that is not
// less than x: slices.BinarySearch without its comparison of the result,
// which the callers make themselves.
func search[T uint32 | uint64](sorted []T, x T) int {
	lo, hi := 0, len(sorted)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if sorted[mid] < x {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// each calls f for every member in id order. Writer only for a bitmap,
// whose bits the writer alone may be changing.
func (s *nodeSet) each(f func(id uint32)) {
	if s.bits != nil {
		for w := range s.bits {
			for word := s.bits[w].Load(); word != 0; word &= word - 1 {
				f(uint32(w*64 + bits.TrailingZeros64(word)))
			}
		}
		return
	}
	changes := s.changes
	for _, id := range s.ids {
		for len(changes) > 0 && changes[0]>>1 < uint64(id) {
			f(uint32(changes[0] >> 1)) // an id added
			changes = changes[1:]
		}
		if len(changes) > 0 && changes[0] == change(id, true) {
			changes = changes[1:]
			continue
		}
		f(id)
	}
	for _, c := range changes {
		f(uint32(c >> 1))
	}
}

// wordsFor is the length of a bitmap that holds ids up to top.
func wordsFor(top uint32) int { return int(top/64) + 1 }

// newNodeSet returns the set of ids, given sorted, in its smaller form.
func newNodeSet(ids []uint32) *nodeSet {
	if len(ids) > 2*wordsFor(ids[len(ids)-1]) {
		return bitmapOf(ids, wordsFor(ids[len(ids)-1]))
	}
	return &nodeSet{ids: ids}
}

func bitmapOf(ids []uint32, words int) *nodeSet {
	s := &nodeSet{bits: make([]atomic.Uint64, words)}
	for _, id := range ids {
		s.bits[id/64].Or(1 << (id % 64))
	}
	return s
}

func (s *nodeSet) form() string {
	if s.bits != nil {
		return "bitmap"
	}
	return "sorted"
}

// newMultiReachLocked returns the reachability of e, which nodes a and b
// reach with paths pa and pb.
func newMultiReachLocked(e *entry, a, b uint32, pa, pb int32) *multiReach {
	m := &multiReach{e: e, n: 2}
	m.set.Store(newNodeSet([]uint32{min(a, b), max(a, b)}))
	m.setExtraLocked(a, pa)
	m.setExtraLocked(b, pb)
	sharedObjects.WithLabelValues(m.set.Load().form()).Inc()
	sharedNodes.Add(2)
	return m
}

// dropLocked is called when m's object is no longer reached by several
// nodes; m is then garbage.
func (m *multiReach) dropLocked() {
	sharedObjects.WithLabelValues(m.set.Load().form()).Dec()
	sharedNodes.Add(-float64(m.n))
}

// publishLocked makes s the set readers see.
func (m *multiReach) publishLocked(s *nodeSet) {
	if was := m.set.Load().form(); was != s.form() {
		sharedObjects.WithLabelValues(was).Dec()
		sharedObjects.WithLabelValues(s.form()).Inc()
	}
	m.set.Store(s)
}

// pathsLocked returns the number of paths from the object to node id.
func (m *multiReach) pathsLocked(id uint32) int32 {
	if !m.set.Load().has(id) {
		return 0
	}
	return 1 + m.extra[id]
}

// setPathsLocked records paths paths to node id, adding id to the set or
// taking it out as paths becomes positive or zero.
func (m *multiReach) setPathsLocked(id uint32, paths int32) {
	s := m.set.Load()
	switch member := s.has(id); {
	case paths <= 0:
		if member {
			m.removeLocked(s, id)
		}
	case !member:
		m.addLocked(s, id)
	}
	m.setExtraLocked(id, paths)
}

// setExtraLocked records the paths of member id beyond its first.
func (m *multiReach) setExtraLocked(id uint32, paths int32) {
	if paths > 1 {
		if m.extra == nil {
			m.extra = map[uint32]int32{}
		}
		m.extra[id] = paths - 1
	} else if m.extra != nil {
		delete(m.extra, id)
		if len(m.extra) == 0 {
			m.extra = nil // a map keeps its largest size; an emptied one goes
		}
	}
}

// addLocked adds id, not a member, to the set s that m publishes.
func (m *multiReach) addLocked(s *nodeSet, id uint32) {
	m.n++
	sharedNodes.Inc()
	if s.bits != nil {
		if w := int(id / 64); w >= len(s.bits) {
			// Some room beyond id, so that nodes joining the cluster
			// (ids in order) do not each copy the bitmap.
			words := w + 1 + w/16
			if int(m.n) < words { // the grown bitmap would be too sparse
				m.publishLocked(&nodeSet{ids: m.sortedWithLocked(s, id)})
				return
			}
			grown := make([]atomic.Uint64, words)
			for i := range s.bits {
				grown[i].Store(s.bits[i].Load())
			}
			grown[w].Store(1 << (id % 64))
			m.publishLocked(&nodeSet{bits: grown})
			return
		}
		s.bits[id/64].Or(1 << (id % 64))
		return
	}
	m.changeSortedLocked(s, id, true)
}

// sortedWithLocked returns a new sorted slice of the members of the
// bitmap s and id.
func (m *multiReach) sortedWithLocked(s *nodeSet, id uint32) []uint32 {
	ids := make([]uint32, 0, m.n)
	added := false
	s.each(func(have uint32) {
		if !added && id < have {
			ids = append(ids, id)
			added = true
		}
		ids = append(ids, have)
	})
	if !added {
		ids = append(ids, id)
	}
	return ids
}

// removeLocked takes id, a member, out of the set s that m publishes.
func (m *multiReach) removeLocked(s *nodeSet, id uint32) {
	m.n--
	sharedNodes.Dec()
	if s.bits != nil {
		s.bits[id/64].And(^(uint64(1) << (id % 64)))
		if int(m.n) < len(s.bits) { // under half what the sorted form would cost
			ids := make([]uint32, 0, m.n)
			s.each(func(have uint32) { ids = append(ids, have) })
			m.publishLocked(&nodeSet{ids: ids})
		}
		return
	}
	m.changeSortedLocked(s, id, false)
}

// changeSortedLocked adds id to the sorted form s (join) or takes it out,
// by publishing s with one more change, or rebuilt with every change in
// it once they are too many to search or copy cheaply, or as a bitmap once
// that is smaller.
func (m *multiReach) changeSortedLocked(s *nodeSet, id uint32, join bool) {
	next := &nodeSet{ids: s.ids}
	// A join of an id whose removal is pending undoes that removal, and a
	// leave of an id whose addition is pending undoes that addition.
	if i := search(s.changes, change(id, false)); i < len(s.changes) && s.changes[i]>>1 == uint64(id) {
		next.changes = slices.Concat(s.changes[:i], s.changes[i+1:])
	} else {
		next.changes = make([]uint64, len(s.changes)+1) // exact: append's growth would double it
		copy(next.changes, s.changes[:i])
		next.changes[i] = change(id, !join)
		copy(next.changes[i+1:], s.changes[i:])
	}
	if len(next.changes) == 0 {
		next.changes = nil
	}
	top := last(s.ids) // at least the highest member, with the additions
	if n := len(next.changes); n > 0 {
		top = max(top, uint32(next.changes[n-1]>>1))
	}
	if c := len(next.changes); int(m.n) > 2*wordsFor(top) || c*c > 2*len(s.ids) {
		ids := make([]uint32, 0, m.n)
		next.each(func(have uint32) { ids = append(ids, have) })
		next = newNodeSet(ids)
	}
	m.publishLocked(next)
}

func last(ids []uint32) uint32 {
	if len(ids) == 0 {
		return 0
	}
	return ids[len(ids)-1]
}

// eachLocked calls f for every member with its path count, in id order.
func (m *multiReach) eachLocked(f func(id uint32, paths int32)) {
	m.set.Load().each(func(id uint32) { f(id, 1+m.extra[id]) })
}

// onlyLocked returns the one member of a set of one.
func (m *multiReach) onlyLocked() (id uint32, paths int32) {
	m.eachLocked(func(i uint32, p int32) { id, paths = i, p })
	return id, paths
}
