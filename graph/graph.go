package graph

import (
	"sync"
	"sync/atomic"
)

// Graph is the authorization graph. The zero value is not usable; call New.
type Graph struct {
	// mu serializes writers and guards every field marked "writer only".
	// Readers never take it, nor any other lock.
	mu sync.Mutex

	objects *rtable[ObjectRef, entry]   // every object with a path, or held by a record
	multi   *rtable[*entry, multiReach] // reachability of objects reached from more than one node
	nodes   *rtable[string, nodeEntry]  // node name -> dense id
	names   []string                    // node id -> name; writer only

	pods     map[*entry]*podRecord  // by the pod's own entry; writer only
	pvs      map[*entry]*pvRecord   // by the PV's own entry; writer only
	scratch  []*entry               // a pod's references while collected; writer only
	claimPVs map[*entry][]*pvRecord // PVs bound to a claim; writer only
	owners   map[ObjectRef]*entry   // attachments and slices; writer only
	sizes    [numKinds]atomic.Int64 // live objects by kind

	observers []Observer // writer only
	changes   changeLog  // writer only
}

// entry is one object and its reachability. reach is what readers look
// at: 0 when no node reaches the object, id+1 when exactly node id does
// (with count paths), manyNodes when several do (see Graph.multi and
// multiReach). The layout keeps an entry at 48 bytes; there is one per
// object in the cluster that a pod or PV refers to.
type entry struct {
	ns, name string
	reach    atomic.Uint32
	count    int32 // paths to the single reaching node; writer only
	holders  int32 // records referring to the entry; writer only
	kind     Kind
}

const manyNodes = ^uint32(0)

func (e *entry) ref() ObjectRef { return ObjectRef{Kind: e.kind, Namespace: e.ns, Name: e.name} }

type nodeEntry struct {
	name string
	id   uint32
}

// podRecord is what a pod added: paths from itself and from each object
// it references to its node. Kept so that removal takes away exactly what
// was added, whatever the object looks like by then.
type podRecord struct {
	node uint32
	self *entry
	uses []*entry // distinct objects the pod references
}

type pvRecord struct {
	self    *entry
	claim   *entry
	secrets []*entry
}

// New returns an empty graph.
func New() *Graph {
	return &Graph{
		objects:  newRTable(func(e *entry) ObjectRef { return e.ref() }),
		multi:    newRTable(func(m *multiReach) *entry { return m.e }),
		nodes:    newRTable(func(n *nodeEntry) string { return n.name }),
		pods:     map[*entry]*podRecord{},
		pvs:      map[*entry]*pvRecord{},
		claimPVs: map[*entry][]*pvRecord{},
		owners:   map[ObjectRef]*entry{},
		changes:  changeLog{initial: map[changeKey]bool{}},
	}
}

// Reachable reports whether a path leads from the object to node: whether
// node may read it. It takes no lock and allocates nothing: two lock-free
// table lookups and an atomic load.
func (g *Graph) Reachable(node string, ref ObjectRef) bool {
	n := g.nodes.get(node)
	if n == nil {
		return false
	}
	e := g.objects.get(ref)
	if e == nil {
		return false
	}
	// A writer turning a many-node object back into a one-node object
	// stores the new reach before it drops the multiReach; a reader that
	// saw manyNodes and then finds no multiReach reads reach again.
	for range 3 {
		switch r := e.reach.Load(); r {
		case 0:
			return false
		case manyNodes:
			if m := g.multi.get(e); m != nil {
				s := m.set.Load()
				if s.bits != nil {
					return s.bitmapHas(n.id)
				}
				return s.sortedHas(n.id)
			}
		default:
			return r == n.id+1
		}
	}
	return false // the writer flipped it thrice meanwhile; answer as before the first write
}

// Len returns the number of objects of kind in the graph.
func (g *Graph) Len(kind Kind) int { return int(g.sizes[kind].Load()) }
