package nodecopy

import (
	"fmt"

	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// Observations: what the node was served of its view by another way
// than the view's channel (kube-apiserver, while the hub was away or
// could not answer a read; a hub channel or bulk get, while the copy
// lacked an object). The copy takes in every state served that is newer
// than its own, and every deletion served, so that whatever it answers
// later, live or offline, is never older than what the node was served
// (docs/api.md, "What the copy never forgets").
//
// An observation is no batch of the view: it moves no type's position
// (the copy does not hold the whole type at the observed version, only
// what was served of it), and the view's later changes of the same
// object at or before the observed version are older than the copy's and
// are dropped, as a replica behind the copy's are. A deletion is kept as
// a floor for its object's name (gone) until the copy's position of the
// type passes it: no state at or before it comes back, from the hub, a
// view opened afresh, or a persisted copy.

// Observed is one observation: a state served (ADDED, MODIFIED, or an
// item of a list or a get), or a deletion (DELETED, its object the last
// state at the version of the deletion), as JSON with apiVersion and
// kind (or in kube-apiserver's protobuf, as the view may carry objects).
type Observed struct {
	Type   watch.EventType
	Object []byte
}

// Observe takes in what the node was served. It returns the
// observations it refused (an object outside the node's view, one that
// does not parse, a type the copy's view does not carry), how many
// changed the copy, and how many states it passed over as outside the
// view though the node may read them (unviewedLocked). A copy without a
// view takes in nothing: it answers nothing either.
func (c *Copy) Observe(obs []Observed) (refused []error, changed, passed int) {
	parsed, refused := c.parseObserved(obs)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.whole {
		return refused, 0, 0
	}
	var in namespaces
	for _, p := range parsed {
		if !c.pos.Names(p.i) {
			continue
		}
		var ok bool
		switch {
		case p.typ == watch.Deleted:
			ok = c.observeGoneLocked(p.i, p.o.key(), p.o.RV, p.o)
		case c.unviewedLocked(p.i, p.o, &in):
			passed++
		default:
			ok = c.observeStateLocked(p.i, p.o)
		}
		if ok {
			changed++
		}
	}
	if changed > 0 {
		c.changedLocked()
	}
	return refused, changed, passed
}

// ObserveList takes in a list the node was served: its items, and the
// absence at rv of every other object that f selects (a list is the
// whole of what it selects at its version). The copy's objects that f
// selects, that the list lacks and that are older than rv are deleted as
// of rv. f must be a selection the copy evaluates exactly (copy reads
// are made of such). Items outside the view though the node may read
// them (unviewedLocked) are passed over, and counted.
func (c *Copy) ObserveList(i int, f Filter, rv uint64, items [][]byte) (refused []error, changed, passed int) {
	obs := make([]Observed, len(items))
	for j, raw := range items {
		obs[j] = Observed{Type: watch.Added, Object: raw}
	}
	parsed, refused := c.parseObserved(obs)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.whole || !c.pos.Names(i) {
		return refused, 0, 0
	}
	listed := map[objKey]bool{}
	var in namespaces
	for _, p := range parsed {
		if p.i != i {
			refused = append(refused, fmt.Errorf("a %s in a list of %s", v1alpha1.NodeViewTypes[p.i].Kind, v1alpha1.NodeViewTypes[i].Resource))
			continue
		}
		listed[p.o.key()] = true
		if c.unviewedLocked(i, p.o, &in) {
			passed++
			continue
		}
		if c.observeStateLocked(i, p.o) {
			changed++
		}
	}
	for k, o := range c.objects[i] {
		if listed[k] || o.RV >= rv || !f.matches(o) {
			continue
		}
		if c.observeGoneLocked(i, k, rv, nil) {
			changed++
		}
	}
	// A name the list selects and lacks is gone at rv even if the copy
	// does not hold it: no state of it at or before rv may come back.
	if k := (objKey{f.Namespace, f.Name}); f.Name != "" && !listed[k] && c.objects[i][k] == nil {
		c.goneFloorLocked(i, k, rv)
	}
	if changed > 0 {
		c.changedLocked()
	}
	return refused, changed, passed
}

type observedObject struct {
	typ watch.EventType
	i   int
	o   *Object
}

// parseObserved parses obs outside the lock, refusing what the node may
// not have whatever the graph says, as Apply does.
func (c *Copy) parseObserved(obs []Observed) ([]observedObject, []error) {
	var refused []error
	out := make([]observedObject, 0, len(obs))
	for _, ob := range obs {
		switch ob.Type {
		case watch.Added, watch.Modified, watch.Deleted:
		default:
			refused = append(refused, fmt.Errorf("observed event type %q", ob.Type))
			continue
		}
		i, o, err := parseObject(ob.Object)
		if err == nil {
			err = c.admits(i, o)
		}
		if err != nil {
			refused = append(refused, err)
			continue
		}
		out = append(out, observedObject{ob.Type, i, o})
	}
	return out, refused
}

// observeStateLocked takes in a state served of an object of type i:
// unless the copy holds it as new, or saw it deleted at or after its
// version, it becomes the copy's, and the copy's watches see it.
func (c *Copy) observeStateLocked(i int, o *Object) bool {
	k := o.key()
	held := c.objects[i][k]
	if held != nil && held.RV >= o.RV || c.gone[i][k] >= o.RV {
		return false
	}
	c.objects[i][k] = o
	delete(c.gone[i], k)
	t := watch.Modified
	if held == nil {
		t = watch.Added
	}
	c.log.append(change{typ: t, resource: i, rv: o.RV, obj: o})
	return true
}

// observeGoneLocked takes in the deletion of k, of type i, at rv (last,
// if not nil, its last state at rv): unless the copy holds a newer
// object under the name (created again since), the copy no longer has
// it, its watches see it deleted, and no state of it at or before rv
// comes back.
func (c *Copy) observeGoneLocked(i int, k objKey, rv uint64, last *Object) bool {
	held := c.objects[i][k]
	if held != nil && held.RV > rv {
		return false
	}
	c.goneFloorLocked(i, k, rv)
	if held == nil {
		return false
	}
	delete(c.objects[i], k)
	if last == nil || last.RV != rv {
		last = deletedAt(held, rv)
	}
	c.log.append(change{typ: watch.Deleted, resource: i, rv: rv, obj: last})
	return true
}

func (c *Copy) goneFloorLocked(i int, k objKey, rv uint64) {
	if rv <= c.at[i] {
		// The copy follows the type past it: the view sends nothing
		// at or before it again.
		return
	}
	if c.gone[i] == nil {
		c.gone[i] = map[objKey]uint64{}
	}
	c.gone[i][k] = max(c.gone[i][k], rv)
}

// staleLocked reports whether a state of k, of type i, at rv is older
// than what the copy holds or saw gone: the view's, from a replica
// behind what the node was served.
func (c *Copy) staleLocked(i int, k objKey, rv uint64) bool {
	held := c.objects[i][k]
	return held != nil && held.RV >= rv || c.gone[i][k] >= rv
}

// pruneGoneLocked forgets the deletions the copy's versions have passed:
// the view resumes from past them and sends nothing before.
func (c *Copy) pruneGoneLocked() {
	for i, g := range c.gone {
		for k, rv := range g {
			if rv <= c.at[i] {
				delete(g, k)
			}
		}
	}
}

// Gone is one deletion the copy keeps as a floor: no state of the object
// at or before RV comes back.
type Gone struct {
	Resource, Namespace, Name string
	RV                        uint64
}

// Gones returns the deletions the copy keeps, for persisting with it.
func (c *Copy) Gones() []Gone {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []Gone
	for i, g := range c.gone {
		for k, rv := range g {
			out = append(out, Gone{Resource: v1alpha1.NodeViewTypes[i].Resource, Namespace: k.namespace, Name: k.name, RV: rv})
		}
	}
	return out
}

// RestoreGones takes back the deletions of a persisted copy, after its
// objects (Apply of its initial state). One of a type the view does not
// carry is an error, and nothing is taken.
func (c *Copy) RestoreGones(gs []Gone) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, g := range gs {
		if i := v1alpha1.NodeViewTypeIndex(g.Resource); i < 0 {
			return fmt.Errorf("a deletion of %q, not a type of the node view", g.Resource)
		}
	}
	for _, g := range gs {
		i := v1alpha1.NodeViewTypeIndex(g.Resource)
		k := objKey{g.Namespace, g.Name}
		if o := c.objects[i][k]; o != nil && o.RV <= g.RV {
			delete(c.objects[i], k)
		}
		c.goneFloorLocked(i, k, g.RV)
	}
	c.changedLocked()
	return nil
}
