package graph

import (
	"hash/maphash"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// numShards spreads objects over this many independently locked maps.
// Readers of different shards never touch the same cache line; 64 keeps
// the chance that two of a 2-core machine's concurrent readers share a
// shard under 2% while costing 4 KiB.
const numShards = 64

// Graph is the authorization graph. The zero value is not usable; call New.
type Graph struct {
	// mu serializes writers and guards everything below shards. Readers
	// never take it.
	mu sync.Mutex

	shards [numShards]shard

	pods   map[podKey]*podRecord
	pvs    map[string]*pvRecord
	owners map[ObjectRef]*entry // VolumeAttachments and ResourceSlices, by name

	// inherit lists, for a PVC or PV entry, the entries that are reachable
	// wherever it is: the PVs bound to a PVC, the secrets of a PV.
	inherit map[*entry][]*entry

	// sizes counts live objects by kind, for metrics.
	sizes [numKinds]int

	observers []Observer
	changes   changeLog
}

// shard is one of the maps readers look objects up in.
type shard struct {
	mu      sync.RWMutex
	objects map[ObjectRef]*entry
	_       [64 - 32]byte // one cache line per shard: readers of neighbours must not contend
}

// entry is one object's reachability: the number of paths from it to each
// node. Most objects are reachable from one node, so the first node lives
// inline and a map is made only for a second.
//
// node, count and more are written under both Graph.mu and the shard's
// write lock, and read under the shard's read lock. ref and holders are
// used by writers only.
type entry struct {
	node  string
	count int32
	more  map[string]int32

	// holders counts the records that refer to this entry (pods, PVs, an
	// attachment or slice). At zero the entry leaves its shard; there can
	// be no path left by then.
	holders int32
	ref     ObjectRef
}

type podKey struct{ namespace, name string }

type podRecord struct {
	uid  types.UID
	node string
	self *entry
	uses []*entry // distinct objects the pod references
}

type pvRecord struct {
	self    *entry
	claim   *entry
	secrets []*entry
}

var shardSeed = maphash.MakeSeed()

// New returns an empty graph.
func New() *Graph {
	g := &Graph{
		pods:    map[podKey]*podRecord{},
		pvs:     map[string]*pvRecord{},
		owners:  map[ObjectRef]*entry{},
		inherit: map[*entry][]*entry{},
	}
	for i := range g.shards {
		g.shards[i].objects = map[ObjectRef]*entry{}
	}
	g.changes.init()
	return g
}

func (g *Graph) shardOf(ref ObjectRef) *shard {
	h := maphash.String(shardSeed, ref.Name)
	return &g.shards[(h^uint64(ref.Kind))%numShards]
}

// Reachable reports whether a path leads from the object to node: whether
// node may read it. It takes no lock but the object's shard's read lock, for
// one map lookup, and allocates nothing.
func (g *Graph) Reachable(node string, ref ObjectRef) bool {
	s := g.shardOf(ref)
	s.mu.RLock()
	e := s.objects[ref]
	ok := e != nil && e.pathsShardLocked(node) > 0
	s.mu.RUnlock()
	return ok
}

// Len returns the number of objects of kind in the graph.
func (g *Graph) Len(kind Kind) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sizes[kind]
}

// pathsShardLocked returns the number of paths from e to node.
func (e *entry) pathsShardLocked(node string) int32 {
	if e.count > 0 && e.node == node {
		return e.count
	}
	if e.more != nil {
		return e.more[node]
	}
	return 0
}

// eachNodeLocked calls f for every node e reaches, with its path count.
// Writers only: readers never iterate.
func (e *entry) eachNodeLocked(f func(node string, paths int32)) {
	if e.count > 0 {
		f(e.node, e.count)
	}
	for n, c := range e.more {
		f(n, c)
	}
}
