package nodecopy

import (
	"encoding/json"
	"strconv"

	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// replaceLocked takes in a view opened afresh (the hub could not resume
// the copy's position) at pos, at or past the copy's: its objects
// (types[j] the type of objects[j]) replace the copy's, and the copy's
// watches see the difference, as a reflector's relist hands its store
// the difference, rather than ending with 410: every object's last
// state (ADDED, MODIFIED), and the ones gone. A gone object of a type
// whose objects enter and leave the view (leaving) may have left it
// rather than been deleted: it is LEFT (no state of it follows; a watch
// of it by name ends), any other is DELETED with its last state at pos,
// the version the copy knows it gone at. One of those types that the
// copy lacked and that is no newer than the copy's version of its type
// entered the view: ENTERED, which a watch of many objects sees whatever
// its version (read.go). What enters goes in the view's order and what goes in the reverse,
// so that a pod still has what it uses, as in a batch of the view.
//
// A replica behind the copy (its store of a type at a version before the
// copy's) sends older states than the copy holds, and lacks objects the
// copy has from after its version: the copy keeps its own, newer, and the
// replica's changes bring it up to them; the copy never goes back.
//
// What this gives up against the view's own batches: the versions in
// between (an object changed twice meanwhile is sent once, at its last),
// which a watch of kube-apiserver from before would have had one by one.
// The hub's channel of one object does the same on a replica whose log
// does not reach its version (docs/api.md, "Reads from the node's copy").
func (c *Copy) replaceLocked(pos v1alpha1.NodeViewPosition, types []int, objects []*Object) {
	var fresh [numTypes]map[objKey]*Object
	for i := range fresh {
		fresh[i] = map[objKey]*Object{}
	}
	for j, o := range objects {
		if i, k := types[j], o.key(); c.gone[i][k] < o.RV {
			fresh[i][k] = o
		}
		// else: the copy saw it deleted after this state; a new
		// object under the name is a later one.
	}
	for i := range fresh {
		for k, o := range fresh[i] {
			switch old, ok := c.objects[i][k]; {
			case !ok && leaving[i] && o.RV <= c.at[i]:
				c.log.append(change{typ: v1alpha1.NodeViewEntered, resource: i, rv: max(pos.At[i], c.at[i]), obj: o})
			case !ok:
				c.log.append(change{typ: watch.Added, resource: i, rv: o.RV, obj: o})
			case old.RV < o.RV:
				c.log.append(change{typ: watch.Modified, resource: i, rv: o.RV, obj: o})
			case old.RV > o.RV:
				// A replica behind the copy: the copy's is newer.
				fresh[i][k] = old
			}
		}
	}
	for i := numTypes - 1; i >= 0; i-- {
		if !pos.Names(i) {
			// A view of a version without the type (an older hub):
			// nothing of it is the copy's to answer any more.
			c.objects[i] = map[objKey]*Object{}
			continue
		}
		for k, old := range c.objects[i] {
			if _, ok := fresh[i][k]; ok {
				continue
			}
			if old.RV > pos.At[i] {
				// Newer than the replica's view of the type: not gone,
				// not yet there.
				fresh[i][k] = old
				continue
			}
			if leaving[i] {
				c.log.append(change{typ: v1alpha1.NodeViewLeft, resource: i, rv: pos.At[i], obj: old})
				continue
			}
			c.log.append(change{typ: watch.Deleted, resource: i, rv: pos.At[i], obj: deletedAt(old, pos.At[i])})
		}
		c.objects[i] = fresh[i]
	}
}

// leaving are the types whose objects enter and leave the view without
// being created or deleted: those the graph lets the node reach
// (secrets, configmaps, service accounts, volumes, claims) and services,
// in the view while the node has a pod in their namespace.
var leaving = func() [numTypes]bool {
	var r [numTypes]bool
	for _, name := range []string{"secrets", "configmaps", "serviceaccounts", "persistentvolumes", "persistentvolumeclaims", "services"} {
		r[v1alpha1.NodeViewTypeIndex(name)] = true
	}
	return r
}()

// deletedAt is o's last state as the object of a DELETED event at rv,
// as kube-apiserver's DELETED carries the version of the deletion.
func deletedAt(o *Object, rv uint64) *Object { return asOf(o, rv) }

// asOf is o with resourceVersion rv: its state, as of a later version
// at which it did not change.
func asOf(o *Object, rv uint64) *Object {
	if o.RV == rv {
		return o
	}
	if IsProtobuf(o.Raw) {
		raw, err := protobufWithResourceVersion(o.Raw, strconv.FormatUint(rv, 10))
		if err != nil {
			return o // parsed once already: unreachable
		}
		d := *o
		d.RV, d.Raw = rv, raw
		return &d
	}
	var m map[string]any
	if err := json.Unmarshal(o.Raw, &m); err != nil {
		return o // parsed once already: unreachable
	}
	meta, _ := m["metadata"].(map[string]any)
	if meta == nil {
		return o
	}
	meta["resourceVersion"] = strconv.FormatUint(rv, 10)
	raw, err := json.Marshal(m)
	if err != nil {
		return o
	}
	d := *o
	d.RV, d.Raw = rv, raw
	return &d
}
