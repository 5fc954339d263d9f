package nodecopy

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

const numTypes = len(v1alpha1.NodeViewTypes)

// Copy is the endpoint's copy of its node's view: the objects of each
// type, the position of the last batch applied, and a log of the changes
// that lets a watch resume from a resourceVersion. It is a synchronous
// data structure: Apply takes in a batch, readers read and wait under
// mu, and nothing in it starts a goroutine.
type Copy struct {
	node string

	mu sync.RWMutex
	// whole: the copy holds a whole view, at pos. Before the first
	// initial state, or after Clear, nothing is served from it.
	whole bool                      // guarded by mu
	pos   v1alpha1.NodeViewPosition // guarded by mu
	// at is, per type, the version the copy answers at: the position's,
	// except after a view afresh from a replica behind the copy, whose
	// objects the copy took only where they are newer (replaceLocked).
	at      [numTypes]uint64             // guarded by mu
	objects [numTypes]map[objKey]*Object // guarded by mu
	// gone is, per type, the names the copy saw deleted at a version
	// past its own of the type (observe.go): no state of them at or
	// before it comes back.
	gone [numTypes]map[objKey]uint64 // guarded by mu
	log  changeLog                   // guarded by mu
	// generation counts the views the copy has held: a watch of an
	// earlier one ends with 410, as a watch of kube-apiserver's watch
	// cache does when the cache starts over.
	generation uint64 // guarded by mu
	// changed is closed, and replaced, each time the copy changes.
	changed chan struct{} // guarded by mu
	// progress is the token of the last progress bookmark applied.
	progress uint64 // guarded by mu
}

// New returns an empty copy of node's view.
func New(node string) *Copy {
	c := &Copy{node: node, changed: make(chan struct{})}
	for i := range c.objects {
		c.objects[i] = map[objKey]*Object{}
	}
	return c
}

// Node is the node whose view the copy holds.
func (c *Copy) Node() string { return c.node }

// Event is one event of a batch: its type and its object, as the hub sent
// them.
type Event struct {
	Type   watch.EventType
	Object []byte
}

// Batch is the change of the view from one bookmark to the next: its
// events, and the closing bookmark's position. Initial says that it is a
// whole view (the initial state), which replaces the copy.
type Batch struct {
	Events   []Event
	Position string
	Initial  bool
	// Progress is the token of the progress request the bookmark
	// answers, 0 if none: the endpoint's tokens are increasing numbers.
	Progress uint64
}

// ErrGoesBack is the error of a batch whose position goes back past what
// the copy holds: for some type, an At before the last change of it the
// copy has taken in (its position's Since). The copy holds the type's
// state at every version from Since on, so an At from there is a
// position it holds, which a resume on a replica behind on a quiet type
// sends (docs/api.md, "The node view"); before it, the batch would take
// the copy back. The batch is not applied.
var ErrGoesBack = errors.New("the batch's position goes back past the copy's")

// ErrOutsideView is the error of an event whose object the node may not
// have: a pod of another node, another node's Node. The event is not
// applied; the rest of the batch is.
var ErrOutsideView = errors.New("an object outside the node's view")

// Apply takes in b whole. It returns the events it refused, each an error
// wrapping ErrOutsideView or naming what is wrong with it, and an error
// if the batch as a whole cannot be applied (a position that does not
// parse, or that goes back: ErrGoesBack), in which case the copy is
// unchanged and the caller must open the view again.
//
// A position whose At of a type is lower than the copy's, but not before
// its Since, is taken: it becomes the copy's position, the one it
// resumes from, while the versions the copy answers at (At) never go
// back.
func (c *Copy) Apply(b Batch) (refused []error, err error) {
	pos, err := v1alpha1.ParseNodeViewPosition(b.Position)
	if err != nil {
		return nil, fmt.Errorf("the batch's bookmark: %w", err)
	}
	type parsed struct {
		typ watch.EventType
		i   int
		o   *Object
	}
	events := make([]parsed, 0, len(b.Events))
	for _, e := range b.Events {
		i, o, err := parseObject(e.Object)
		if err == nil && !pos.Names(i) {
			err = fmt.Errorf("%s %s/%s, of a type the view's version does not carry: %w",
				v1alpha1.NodeViewTypes[i].Kind, o.Namespace, o.Name, ErrOutsideView)
		}
		if err == nil {
			err = c.admits(i, o)
		}
		if err == nil {
			err = knownType(e.Type, b.Initial)
		}
		if err != nil {
			refused = append(refused, err)
			continue
		}
		events = append(events, parsed{e.Type, i, o})
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case b.Initial && c.whole:
		if err := c.behindLocked(pos); err != nil {
			return refused, err
		}
		objects := make([]*Object, len(events))
		types := make([]int, len(events))
		for j, e := range events {
			objects[j], types[j] = e.o, e.i
		}
		c.replaceLocked(pos, types, objects)
		c.setPositionLocked(pos)
		c.changedLocked()
		return refused, nil
	case b.Initial:
		c.resetLocked(pos)
	default:
		if !c.whole {
			return refused, errors.New("a change before the view's initial state")
		}
		if pos.Types != c.pos.Types {
			return refused, fmt.Errorf("the bookmark's position %s names other types than the copy's view", b.Position)
		}
		for i := range pos.At {
			if pos.At[i] < c.pos.Since[i] {
				return refused, fmt.Errorf("%w: %s at %d, the copy holds it from %d to %d", ErrGoesBack,
					v1alpha1.NodeViewTypes[i].Resource, pos.At[i], c.pos.Since[i], c.at[i])
			}
		}
	}
	for _, e := range events {
		// ENTERED and LEFT take the type's version, which for the
		// copy's watches is the one it answers at, never lower.
		c.applyLocked(e.typ, e.i, e.o, max(pos.At[e.i], c.at[e.i]), b.Initial)
	}
	c.setPositionLocked(pos)
	c.progress = max(c.progress, b.Progress)
	c.changedLocked()
	return refused, nil
}

func (c *Copy) changedLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// setPositionLocked moves the copy to pos, the position it resumes the
// view from; the versions it answers at never go back.
func (c *Copy) setPositionLocked(pos v1alpha1.NodeViewPosition) {
	c.pos = pos
	for i := range c.at {
		c.at[i] = max(c.at[i], pos.At[i])
	}
	c.pruneGoneLocked()
}

// ErrBehind is a view opened afresh from a replica behind the copy: its
// state of a type is from before the copy's. Taking it would send the
// copy's watches back (an object the copy saw deleted, added again); the
// caller opens the view again a moment later, when the replica has
// caught up, or lands on another.
var ErrBehind = errors.New("a view from a replica behind the copy")

// behindLocked refuses a view afresh at pos whose state of a type the
// copy carries is older than the copy's: the copy holds its type's state
// at every version from its position's Since to At, so a view at any of
// them is no older.
func (c *Copy) behindLocked(pos v1alpha1.NodeViewPosition) error {
	for i := range pos.At {
		if pos.Names(i) && c.pos.Names(i) && pos.At[i] < c.pos.Since[i] {
			return fmt.Errorf("%w: %s at %d, the copy at %d", ErrBehind, v1alpha1.NodeViewTypes[i].Resource, pos.At[i], c.pos.Since[i])
		}
	}
	return nil
}

// admits refuses what the node may not have whatever the graph says: a
// pod of another node, another node's Node. What the graph decides (a
// secret reached through a pod) the endpoint cannot check without the
// graph, which it does not link: the hub decides it.
func (c *Copy) admits(i int, o *Object) error {
	switch v1alpha1.NodeViewTypes[i].Resource {
	case "pods":
		if o.NodeName != c.node {
			return fmt.Errorf("pod %s/%s of node %q: %w", o.Namespace, o.Name, o.NodeName, ErrOutsideView)
		}
	case "nodes", "csinodes":
		if o.Name != c.node {
			return fmt.Errorf("%s %q: %w", v1alpha1.NodeViewTypes[i].Kind, o.Name, ErrOutsideView)
		}
	}
	return nil
}

func knownType(t watch.EventType, initial bool) error {
	switch t {
	case watch.Added:
		return nil
	case watch.Modified, watch.Deleted, v1alpha1.NodeViewEntered, v1alpha1.NodeViewLeft:
		if !initial {
			return nil
		}
	}
	return fmt.Errorf("event type %q in a batch (initial: %t)", t, initial)
}

// resetLocked empties the copy for a new view at pos.
func (c *Copy) resetLocked(pos v1alpha1.NodeViewPosition) {
	for i := range c.objects {
		c.objects[i] = map[objKey]*Object{}
	}
	c.gone = [numTypes]map[objKey]uint64{}
	c.log.reset(pos.At)
	c.generation++
	c.whole = true
	c.at = pos.At
}

// applyLocked takes in one event of type i, of a batch whose position has
// at for the type.
func (c *Copy) applyLocked(t watch.EventType, i int, o *Object, at uint64, initial bool) {
	objects := c.objects[i]
	k := o.key()
	if initial {
		objects[k] = o
		return
	}
	// The order of a watch of the type: a change's own resourceVersion;
	// entering and leaving the view are no change of the object, and
	// take the version the batch brings the type to.
	rv := o.RV
	held, ok := objects[k]
	switch t {
	case watch.Added, watch.Modified, v1alpha1.NodeViewEntered:
		if c.staleLocked(i, k, o.RV) {
			// The copy has it as new, or saw it deleted since: what the
			// node was served by another way (observe.go), or taken
			// from a replica ahead of the one that sends this.
			return
		}
	case watch.Deleted:
		if !ok || held.RV > o.RV {
			return // nothing to tell, or created again since
		}
	case v1alpha1.NodeViewLeft:
		if !ok {
			return // nothing to tell: the copy does not hold it
		}
	}
	switch t {
	case watch.Added, watch.Modified:
		objects[k] = o
	case v1alpha1.NodeViewEntered:
		objects[k] = o
		rv = at
	case watch.Deleted:
		delete(objects, k)
	case v1alpha1.NodeViewLeft:
		delete(objects, k)
		rv = at
	}
	c.log.append(change{typ: t, resource: i, rv: rv, obj: o})
}

// Clear empties the copy: nothing is served from it until the next
// initial state. Its watches end with 410.
func (c *Copy) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.resetLocked(v1alpha1.NodeViewPosition{})
	c.whole = false
	c.changedLocked()
}

// Types are the types of the view the copy holds (0 before one).
func (c *Copy) Types() v1alpha1.NodeViewTypeSet {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.whole {
		return 0
	}
	return c.pos.Types
}

// Position is the copy's position, and whether it holds a whole view.
func (c *Copy) Position() (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.whole {
		return "", false
	}
	return c.pos.String(), true
}

// Len is the number of objects the copy holds.
func (c *Copy) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := 0
	for _, m := range c.objects {
		n += len(m)
	}
	return n
}

// Objects calls f with every object of the copy, type by type in the
// view's order, under the copy's read lock: f must not call the copy.
// It returns the position they are at, false if the copy holds no whole
// view.
func (c *Copy) Objects(f func(resource string, o *Object)) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.whole {
		return "", false
	}
	for i, m := range c.objects {
		for _, o := range m {
			f(v1alpha1.NodeViewTypes[i].Resource, o)
		}
	}
	return c.pos.String(), true
}

// Progressed reports whether the copy has applied the bookmark answering
// the progress request token, or a later one.
func (c *Copy) Progressed(token uint64) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.progress >= token
}

// Changed is a channel closed at the copy's next change.
func (c *Copy) Changed() <-chan struct{} {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.changed
}

// Await waits until cond holds of the copy, checking it at each change,
// or until ctx ends; it reports whether cond held. cond is called
// without the copy's lock, so it may read the copy.
func (c *Copy) Await(ctx context.Context, cond func() bool) bool {
	for {
		changed := c.Changed() // before cond: a change after it is seen
		if cond() {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}
