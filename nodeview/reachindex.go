package nodeview

import (
	"iter"

	"github.com/nodeproxy/nodeproxy/graph"
)

// reachIndex is what every view reaches or holds of the graph's kinds
// (and of namespaceKind), kept once for all views: one entry per object,
// holding the view that reaches it and that view's reach (paths, held).
// It answers both questions a step asks, which views a change of an
// object concerns (routing) and what a view knows of an object (addPath,
// show, hide), from the same entry.
//
// Why one index rather than a map per view beside a map of views per
// object: the two held the same (object, view) pairs, each keyed by the
// object, so every object a view reaches cost two map slots with a
// 40-byte key; the index's entries were most of what an open view costs
// the hub (docs/benchmarks.md, "The views' memory"). Here a pair costs
// one slot of 32 bytes, key and value together.
//
// Why its key is not graph.ObjectRef: a Kind and two strings take 40
// bytes with the Kind's padding, and an entry's key is most of its slot.
// The kind and the namespace are interned together as a space (a handful
// per namespace), so the key is a space id and the name: 24 bytes. A
// space goes when its last entry does, so a cluster that creates and
// deletes namespaces does not grow the table of spaces.
//
// Most objects are reached by one view (a pod's own secrets), whose
// reach is held inline with the view's id (ids rather than pointers
// halve the value, 8 bytes with the reach packed); an object several
// views reach (a namespace's kube-root-ca.crt, the namespace itself) has
// a map of its views in shared, and its entry no view (id 0). A view's
// id is freed only once the scan that drops it has taken out its every
// entry, so no entry names a view that is not the one it was made for. A view does not list its own entries:
// dropping views scans the index once for every view closed in a step,
// which costs the index's size per step that closes views rather than
// 40 bytes an object on every open view (Views.dropReachedLocked).
//
// Go maps never give back the memory of entries deleted from them, so
// once three quarters of the entries it held at its largest have gone
// (views closed, pods moved), entries is copied to a map of its size:
// the memory of views gone does not stay with the hub.
//
// It has no lock: Views keeps it under its mu.
type reachIndex struct {
	entries map[indexKey]indexEntry
	shared  map[indexKey]map[*view]reach
	// peak is the most entries held since entries was last made.
	peak int
	// members are the views by id (id 0 is none); freeIDs are the ids
	// of views dropped, to reuse.
	members []*view
	freeIDs []uint32

	spaces map[space]uint32
	// byID are the spaces by id, with how many entries each has; free
	// are the ids of spaces gone, to reuse.
	byID []spaceCount
	free []uint32
	// last is the space looked up last, and its id (ok: it has one):
	// a view's build and a pod's references go through one namespace's
	// objects in a row, and each of them is read and written several
	// times, so most lookups of spaces are the one before.
	last   space
	lastID uint32
	lastOK bool
}

type spaceCount struct {
	space
	entries int32
}

// space is the part of an object's identity that many objects share.
type space struct {
	kind      graph.Kind
	namespace string
}

type indexKey struct {
	space uint32
	name  string
}

// indexEntry is one object's views: the id of the view that reaches it
// and its reach (packed), or id 0 when several do (reachIndex.shared has
// them).
type indexEntry struct {
	id uint32
	r  packedReach
}

// packedReach is a reach in 32 bits: paths, shifted, and held in the
// low bit. A view's paths to an object are its pods and volumes that
// use it, far below 2^31.
type packedReach uint32

func pack(r reach) packedReach {
	p := packedReach(r.paths) << 1
	if r.held {
		p |= 1
	}
	return p
}

func (p packedReach) reach() reach { return reach{paths: int32(p >> 1), held: p&1 == 1} }

// rebuildAbove is the fewest entries at its largest for which entries
// is copied when most go: below it, what the map keeps of entries gone
// is a few groups of slots, not worth a copy.
const rebuildAbove = 1024

func newReachIndex() *reachIndex {
	return &reachIndex{entries: map[indexKey]indexEntry{}, shared: map[indexKey]map[*view]reach{}, spaces: map[space]uint32{}, members: []*view{nil}}
}

// idOf is v's id, given it at its first entry.
func (x *reachIndex) idOf(v *view) uint32 {
	if v.id != 0 {
		return v.id
	}
	if n := len(x.freeIDs); n > 0 {
		v.id, x.freeIDs = x.freeIDs[n-1], x.freeIDs[:n-1]
	} else {
		v.id = uint32(len(x.members))
		x.members = append(x.members, nil)
	}
	x.members[v.id] = v
	return v.id
}

// key is ref's key, false when no entry has ref's space (nor ref).
func (x *reachIndex) key(ref graph.ObjectRef) (indexKey, bool) {
	id, ok := x.spaceID(space{ref.Kind, ref.Namespace})
	return indexKey{space: id, name: ref.Name}, ok
}

func (x *reachIndex) spaceID(sp space) (uint32, bool) {
	if x.lastOK && sp == x.last {
		return x.lastID, true
	}
	id, ok := x.spaces[sp]
	if ok {
		x.last, x.lastID, x.lastOK = sp, id, true
	}
	return id, ok
}

// lookup is ref's entry and its key, false when it has none.
func (x *reachIndex) lookup(ref graph.ObjectRef) (indexKey, indexEntry, bool) {
	k, ok := x.key(ref)
	if !ok {
		return k, indexEntry{}, false
	}
	e, ok := x.entries[k]
	return k, e, ok
}

// reach is what v knows of ref: none when it neither reaches nor holds it.
func (x *reachIndex) reach(v *view, ref graph.ObjectRef) reach {
	k, e, ok := x.lookup(ref)
	switch {
	case !ok:
	case e.id == 0:
		return x.shared[k][v]
	case e.id == v.id:
		return e.r.reach()
	}
	return reach{}
}

// setReach records r as what v knows of ref; an empty r takes v's entry
// out.
func (x *reachIndex) setReach(v *view, ref graph.ObjectRef, r reach) {
	if r == (reach{}) {
		x.remove(v, ref)
		return
	}
	sp := space{ref.Kind, ref.Namespace}
	id, ok := x.spaceID(sp)
	if !ok {
		id = x.newSpace(sp)
	}
	k := indexKey{space: id, name: ref.Name}
	e, ok := x.entries[k]
	switch {
	case !ok:
		x.entries[k] = indexEntry{id: x.idOf(v), r: pack(r)}
		x.byID[id].entries++
		x.peak = max(x.peak, len(x.entries))
	case e.id == 0:
		x.shared[k][v] = r
	case e.id == v.id:
		x.entries[k] = indexEntry{id: e.id, r: pack(r)}
	default:
		x.shared[k] = map[*view]reach{x.members[e.id]: e.r.reach(), v: r}
		x.entries[k] = indexEntry{}
	}
}

// remove takes v's entry for ref out, going back to one view inline when
// one is left, so that an object once shared does not keep its map.
func (x *reachIndex) remove(v *view, ref graph.ObjectRef) {
	k, e, ok := x.lookup(ref)
	switch {
	case !ok:
	case e.id == 0:
		x.leaveShared(k, func(w *view) bool { return w == v })
	case e.id == v.id:
		x.deleteEntry(k)
	}
}

// leaveShared takes out of the shared entry k the views gone says, and
// puts it back inline, or deletes it, when one or none is left.
func (x *reachIndex) leaveShared(k indexKey, gone func(*view) bool) {
	set := x.shared[k]
	for w := range set {
		if gone(w) {
			delete(set, w)
		}
	}
	switch len(set) {
	case 0:
		delete(x.shared, k)
		x.deleteEntry(k)
	case 1:
		delete(x.shared, k)
		for w, r := range set {
			x.entries[k] = indexEntry{id: x.idOf(w), r: pack(r)}
		}
	}
}

func (x *reachIndex) deleteEntry(k indexKey) {
	delete(x.entries, k)
	if x.byID[k.space].entries--; x.byID[k.space].entries == 0 {
		if x.lastID == k.space {
			x.lastOK = false
		}
		delete(x.spaces, x.byID[k.space].space)
		x.byID[k.space] = spaceCount{}
		x.free = append(x.free, k.space)
	}
}

func (x *reachIndex) newSpace(sp space) uint32 {
	var id uint32
	if n := len(x.free); n > 0 {
		id, x.free = x.free[n-1], x.free[:n-1]
	} else {
		id = uint32(len(x.byID))
		x.byID = append(x.byID, spaceCount{})
	}
	x.spaces[sp] = id
	x.byID[id].space = sp
	return id
}

// isShared says whether more than one view reaches or holds ref.
func (x *reachIndex) isShared(ref graph.ObjectRef) bool {
	_, e, ok := x.lookup(ref)
	return ok && e.id == 0
}

// views yields the views that reach or hold ref, in no order.
func (x *reachIndex) views(ref graph.ObjectRef) iter.Seq[*view] {
	return func(yield func(*view) bool) {
		k, e, ok := x.lookup(ref)
		switch {
		case !ok:
		case e.id != 0:
			yield(x.members[e.id])
		default:
			for v := range x.shared[k] {
				if !yield(v) {
					return
				}
			}
		}
	}
}

// dropViews takes every entry of the views gone says out, in one pass
// over the index, then frees their ids.
func (x *reachIndex) dropViews(gone func(*view) bool) {
	for k, e := range x.entries {
		switch {
		case e.id == 0:
			x.leaveShared(k, gone)
		case gone(x.members[e.id]):
			x.deleteEntry(k)
		}
	}
	for id, v := range x.members {
		if v != nil && gone(v) {
			v.id, x.members[id] = 0, nil
			x.freeIDs = append(x.freeIDs, uint32(id))
		}
	}
}

// compact copies entries to a map of its size once three quarters of
// the entries it held at its largest have gone (reachIndex).
func (x *reachIndex) compact() {
	if x.peak < rebuildAbove || len(x.entries) > x.peak/4 {
		return
	}
	entries := make(map[indexKey]indexEntry, len(x.entries))
	for k, e := range x.entries {
		entries[k] = e
	}
	x.entries, x.peak = entries, len(entries)
	indexRebuilds.Inc()
}

// len is how many objects some view reaches or holds.
func (x *reachIndex) len() int { return len(x.entries) }
