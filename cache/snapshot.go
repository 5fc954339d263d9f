package cache

import (
	"github.com/google/btree"
)

// Snapshot is a store's state at one resourceVersion. It never changes:
// a reader that loaded it lists, pages and looks up without a lock and
// without ever seeing a half-applied change, and the store's writer never
// waits for it.
//
// The trees are copy-on-write clones (google/btree, the structure
// kube-apiserver's watch cache uses for its snapshots): taking one costs
// O(1), and the writer's next change copies only the nodes on its path.
type Snapshot struct {
	// RV is the resourceVersion this state is current at: the newest
	// change, list or bookmark the store had taken in.
	RV uint64

	objects *btree.BTreeG[*Object]
	// nodes indexes pods by spec.nodeName; nil for other types.
	nodes *btree.BTreeG[*Object]

	log *changeLog
	// seq is how many changes of log this state includes.
	seq uint64
	// next is closed when the store publishes a newer snapshot.
	next chan struct{}
}

// Get returns the object namespace/name (namespace "" for cluster-scoped
// types).
func (s *Snapshot) Get(namespace, name string) (*Object, bool) {
	return s.objects.Get(&Object{Namespace: namespace, Name: name})
}

// Ascend calls fn for the objects of namespace ("" for all), in key
// order, starting at key (fromNamespace, fromName), until fn returns
// false. A first page starts at (namespace, ""); a continued one where the
// last left off.
func (s *Snapshot) Ascend(namespace, fromNamespace, fromName string, fn func(*Object) bool) {
	s.objects.AscendGreaterOrEqual(&Object{Namespace: fromNamespace, Name: fromName}, func(o *Object) bool {
		if namespace != "" && o.Namespace != namespace {
			return false
		}
		return fn(o)
	})
}

// AscendNode is Ascend over the pods bound to node. Pod stores only;
// others call nothing.
func (s *Snapshot) AscendNode(node, namespace, fromNamespace, fromName string, fn func(*Object) bool) {
	if s.nodes == nil {
		return
	}
	s.nodes.AscendGreaterOrEqual(&Object{NodeName: node, Namespace: fromNamespace, Name: fromName}, func(o *Object) bool {
		if o.NodeName != node || (namespace != "" && o.Namespace != namespace) {
			return false
		}
		return fn(o)
	})
}

// Indexed reports whether the snapshot indexes objects by node.
func (s *Snapshot) Indexed() bool { return s.nodes != nil }

// Next is closed once a newer snapshot exists. Watchers wait on it
// instead of polling.
func (s *Snapshot) Next() <-chan struct{} { return s.next }

// Changes returns the changes after resourceVersion rv up to this
// snapshot, oldest first: the events a watch from rv must deliver, none
// missing and none repeated. It fails with ErrExpired when the log no
// longer holds all of them (rv is older than the log's window, the store
// relisted since, or the log wrapped while the caller read).
func (s *Snapshot) Changes(rv uint64) ([]*Event, error) {
	if rv >= s.RV {
		return nil, nil // nothing after rv here, whatever the ring holds now
	}
	return s.log.since(rv, s.seq)
}

// At returns the snapshot the store had at resourceVersion rv: this one
// if rv is at or after its RV, else the one after the last change at or
// before rv, found in the log. ErrExpired if the log no longer reaches
// back to rv. Exact-version lists and continue tokens read it.
func (s *Snapshot) At(rv uint64) (*Snapshot, error) {
	if rv >= s.RV {
		return s, nil
	}
	return s.log.at(rv, s)
}
