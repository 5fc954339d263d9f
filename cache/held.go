package cache

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodeproxy/nodeproxy/shard"
)

// What a sharded replica holds (issue 38; docs/architecture.md,
// "Sharding"): of the per-node types, only the objects of the nodes in
// its held ranges (Options.Held, then Cache.Hold). Every other type is
// held whole.

// nodeOfFunc says which node an object of a per-node type belongs to.
// perNode false: the object belongs to no node (a ResourceSlice of a
// network-attached pool) and every replica holds it. perNode true with
// node "": an unbound pod, which no node reads and no replica holds.
type nodeOfFunc func(o *Object) (node string, perNode bool)

// nodeOf are the per-node types, and how each names its node.
var nodeOf = map[schema.GroupVersionResource]nodeOfFunc{
	corev1.SchemeGroupVersion.WithResource("pods"):        func(o *Object) (string, bool) { return o.NodeName, true },
	corev1.SchemeGroupVersion.WithResource("nodes"):       func(o *Object) (string, bool) { return o.Name, true },
	storagev1.SchemeGroupVersion.WithResource("csinodes"): func(o *Object) (string, bool) { return o.Name, true },
	storagev1.SchemeGroupVersion.WithResource("volumeattachments"): func(o *Object) (string, bool) {
		if va, ok := typedOf(o).(*storagev1.VolumeAttachment); ok {
			return va.Spec.NodeName, true
		}
		return "", false
	},
	resourcev1.SchemeGroupVersion.WithResource("resourceslices"): func(o *Object) (string, bool) {
		if rs, ok := typedOf(o).(*resourcev1.ResourceSlice); ok && rs.Spec.NodeName != nil && *rs.Spec.NodeName != "" {
			return *rs.Spec.NodeName, true
		}
		return "", false // a pool's or network-attached devices: every node may use them
	},
}

// typedOf is o's typed object, which the store still has when it decides
// (these types are kept decoded); nil should its bytes not decode.
func typedOf(o *Object) runtime.Object {
	obj, err := o.Typed()
	if err != nil {
		return nil
	}
	return obj
}

// holding is what a sharded store holds, published whole on every
// change so that readers (HeldSince, the list transformer) read it
// without the store's lock.
type holding struct {
	// held are the ranges whose objects the store keeps.
	held shard.Set
	// wanted are held and the ranges being acquired: the list
	// transformer keeps the bytes of both.
	wanted shard.Set
	// since is, for each held range, the version from which the change
	// log carries every change of its objects (0: since the store's
	// first list). Shared between holdings until a range is acquired.
	since *[shard.Ranges]uint64
}

// verdict is what a sharded store does with an object a watch or a list
// brings.
type verdict uint8

const (
	// admit: the store takes it in as any store does.
	admit verdict = iota
	// unbound: a pod bound to no node; no replica holds it.
	unbound
	// outOfShard: its node's range is not held.
	outOfShard
	// pending: its range is being acquired; the change waits in the
	// acquisition's buffer.
	pending
	// beforeHeld: its range was acquired at a version at or past this
	// change's, whose list already showed it (watch events only).
	beforeHeld
)

var verdictNames = [...]string{admit: "admit", unbound: "unbound", outOfShard: "out_of_shard", pending: "pending", beforeHeld: "before_held"}

// verdictLocked is what the store does with o. Replace passes list true:
// a list is the whole state, never older than what it replaces, so its
// objects are never beforeHeld. The store's writer lock is held.
func (s *Store) verdictLocked(o *Object, list bool) verdict {
	h := s.hold.Load()
	if h == nil || s.nodeOf == nil {
		return admit
	}
	node, perNode := s.nodeOf(o)
	switch {
	case !perNode:
		return admit
	case node == "":
		return unbound
	}
	r := shard.Range(node)
	switch {
	case s.pending != nil && s.pending.ranges.Has(r):
		return pending
	case !h.held.Has(r):
		return outOfShard
	case !list && o.RV <= h.since[r]:
		return beforeHeld
	}
	return admit
}

// notWanted reports, without the store's lock, whether o is of a node
// whose range the store neither holds nor is acquiring: the list
// transformer drops its bytes at once. A range acquired meanwhile is
// caught by Replace (errHeldChangedDuringList).
func (s *Store) notWanted(o *Object) bool {
	h := s.hold.Load()
	if h == nil || s.nodeOf == nil {
		return false
	}
	node, perNode := s.nodeOf(o)
	return perNode && (node == "" || !h.wanted.HasNode(node))
}

// HeldSince is the version from which this store's change log carries
// every change of node's objects: 0 when the store has held them since
// its first list (and for every type that is not per node, and for an
// unsharded cache); the version its range was acquired at (Cache.Hold)
// otherwise; math.MaxUint64 when the store does not hold node at all. A
// reader resuming node from a version below it would be shown objects
// that arrived silently, as if they had been there all along: it must
// be told the version is expired and start whole (nodeview does).
func (s *Store) HeldSince(node string) uint64 {
	h := s.hold.Load()
	if h == nil || s.nodeOf == nil {
		return 0
	}
	r := shard.Range(node)
	if !h.held.Has(r) {
		return math.MaxUint64
	}
	return h.since[r]
}

// Held reports the ranges the store holds, and false for a store that
// holds everything (unsharded, or a type that is not per node).
func (s *Store) Held() (shard.Set, bool) {
	h := s.hold.Load()
	if h == nil || s.nodeOf == nil {
		return shard.Set{}, false
	}
	return h.held, true
}

// setHoldLocked publishes what the store holds now. The store's writer
// lock is held.
func (s *Store) setHoldLocked(held shard.Set, since *[shard.Ranges]uint64) {
	wanted := held
	if s.pending != nil {
		wanted = wanted.Union(s.pending.ranges)
	}
	s.hold.Store(&holding{held: held, wanted: wanted, since: since})
	// Looked up here, not with the store's other series: an unsharded
	// replica has no such series at all.
	shardRangesHeld.WithLabelValues(s.Resource.Resource).Set(float64(held.Len()))
}
