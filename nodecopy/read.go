package nodecopy

import (
	"context"
	"errors"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// Filter selects objects of one type, as a list or watch request does:
// a namespace, a name (metadata.name=, which the copy looks up), and the
// request's selectors of fields (SelectableFields) and labels.
type Filter struct {
	Namespace string
	Name      string // "" for any
	Fields    fields.Selector
	Labels    labels.Selector
}

func (f Filter) matches(o *Object) bool {
	return (f.Namespace == "" || o.Namespace == f.Namespace) &&
		(f.Name == "" || o.Name == f.Name) &&
		(f.Fields == nil || f.Fields.Empty() || f.Fields.Matches(o.fieldSet())) &&
		(f.Labels == nil || f.Labels.Empty() || f.Labels.Matches(labels.Set(o.Labels)))
}

// ErrNoView is a read of a copy that holds no whole view.
var ErrNoView = errors.New("the copy holds no view")

// List returns the objects of type i that f selects, in namespace and
// name order, and the resourceVersion they are at.
func (c *Copy) List(i int, f Filter) ([]*Object, uint64, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.whole {
		return nil, 0, ErrNoView
	}
	return c.listLocked(i, f), c.at[i], nil
}

func (c *Copy) listLocked(i int, f Filter) []*Object {
	var out []*Object
	if f.Name != "" {
		if o, ok := c.objects[i][objKey{f.Namespace, f.Name}]; ok && f.matches(o) {
			out = append(out, o)
		}
		return out
	}
	for _, o := range c.objects[i] {
		if f.matches(o) {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b *Object) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// Get returns the object namespace/name of type i, nil if the copy does
// not hold it, and the resourceVersion of the type the answer is at.
func (c *Copy) Get(i int, namespace, name string) (*Object, uint64, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.whole {
		return nil, 0, ErrNoView
	}
	return c.objects[i][objKey{namespace, name}], c.at[i], nil
}

// At is the resourceVersion the copy holds type i at, false if it holds
// no whole view, or one whose version does not carry the type.
func (c *Copy) At(i int) (uint64, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.at[i], c.whole && c.pos.Names(i)
}

// Watch is one watch of a type of the copy.
type Watch struct {
	c          *Copy
	resource   int
	filter     Filter
	generation uint64
	cursor     uint64 // the log's sequence number of the next change
	// pending are changes to send before the log's (WatchFrom).
	pending []Change
	// from is the resourceVersion a WatchFrom watch started from (0 for
	// WatchInitial): an object entering the view at a version no later
	// is not a change after it (below, Next).
	from uint64
}

// Errors of a watch.
var (
	// ErrExpired: the changes after the watch's resourceVersion are no
	// longer all in the copy's log, or the copy holds another view since
	// (410 Expired).
	ErrExpired = errors.New("the resourceVersion is older than the copy's log")
	// ErrLeft: the object the watch selects by name left the node's view;
	// the watch ends, and its next list is not the copy's to answer.
	ErrLeft = errors.New("the object left the node's view")
)

// WatchFrom opens a watch of type i from resourceVersion rv: every change
// after it that f selects. ErrExpired if the log no longer holds every
// change after rv; a version the copy has not reached is the caller's to
// wait for (At).
//
// A watch of one object by name from before the log is served as the
// hub serves it: one object's versions are each a whole state, so if the
// copy holds it at rv or earlier nothing was missed, and if later, its
// current state (MODIFIED) stands for the versions in between, which the
// kubelet, keeping the last, would only have overwritten. A deletion in
// between cannot be told from absence: ErrExpired.
func (c *Copy) WatchFrom(i int, f Filter, rv uint64) (*Watch, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.whole {
		return nil, ErrNoView
	}
	w := &Watch{c: c, resource: i, filter: f, generation: c.generation, from: rv}
	seq, ok := c.log.since(i, rv)
	if ok {
		w.cursor = seq
		return w, nil
	}
	o := c.objects[i][objKey{f.Namespace, f.Name}]
	if f.Name == "" || o == nil || !f.matches(o) {
		return nil, ErrExpired
	}
	w.cursor = c.log.end()
	if o.RV > rv {
		w.pending = []Change{{Type: watch.Modified, Object: o}}
	}
	return w, nil
}

// WatchInitial opens a watch of type i that starts with the state f
// selects, returned with the resourceVersion it is at, as a streaming
// list does.
func (c *Copy) WatchInitial(i int, f Filter) (*Watch, []*Object, uint64, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.whole {
		return nil, nil, 0, ErrNoView
	}
	w := &Watch{c: c, resource: i, filter: f, generation: c.generation, cursor: c.log.end()}
	return w, c.listLocked(i, f), c.at[i], nil
}

// Change is one change a watch sees.
type Change struct {
	// Type is ADDED, MODIFIED or DELETED, as kube-apiserver's watch has
	// them: an object entering the view is ADDED.
	Type   watch.EventType
	Object *Object
}

// Next returns the watch's next changes, waiting for some until ctx ends
// or the copy changes without any (then none, and the resourceVersion of
// the type, which a bookmark may carry). ErrExpired when the copy started
// over or the watch fell behind its log; ErrLeft, after the changes
// before it, when a name-selected object left the view.
//
// A served watch waits here most of its life, so this frame is kept
// small and the reading is read's: the frames of a parked watch decide
// whether the runtime can shrink its goroutine's stack
// (docs/benchmarks.md, "The node endpoint's footprint").
func (w *Watch) Next(ctx context.Context) ([]Change, uint64, error) {
	if p := w.pending; p != nil {
		w.pending = nil
		at, _ := w.c.At(w.resource)
		return p, at, nil
	}
	woke := false
	for {
		out, at, wake, err := w.read()
		if len(out) > 0 || err != nil || woke {
			return out, at, err
		}
		select {
		case <-ctx.Done():
			return nil, at, ctx.Err()
		case <-wake:
			woke = true
		}
	}
}

// read takes the watch's changes from the log, and the type's
// resourceVersion and the channel the next change closes.
func (w *Watch) read() ([]Change, uint64, <-chan struct{}, error) {
	w.c.mu.RLock()
	defer w.c.mu.RUnlock()
	if w.c.generation != w.generation {
		return nil, 0, nil, ErrExpired
	}
	changes, ok := w.c.log.read(w.cursor)
	if !ok {
		return nil, 0, nil, ErrExpired
	}
	var out []Change
	for _, ch := range changes {
		w.cursor++
		if ch.resource != w.resource || !w.filter.matches(ch.obj) {
			continue
		}
		switch ch.typ {
		case v1alpha1.NodeViewEntered:
			switch {
			case ch.obj.RV > w.from:
				out = append(out, Change{Type: watch.Added, Object: ch.obj})
			case w.filter.Name == "":
				// A watch of many objects (the kubelet's of services)
				// is the continuation of a list, from the copy or from
				// elsewhere: from the copy, the list lacked the object,
				// which was outside the view then, whatever its
				// version. It comes at the version it entered at, so
				// that the watch's versions never go back; a client
				// that holds it already (it listed elsewhere) takes
				// an ADDED of what it holds as an update, as
				// client-go's informers do.
				out = append(out, Change{Type: watch.Added, Object: asOf(ch.obj, max(ch.rv, w.from))})
			}
			// Otherwise a watch of one object by name: entering the
			// view is no change of the object's, and one at the watch's
			// version or before it is what a client watching from there
			// holds, or read elsewhere (the copy lacked it, and a read
			// by name it lacks is not the copy's to answer).
		case v1alpha1.NodeViewLeft:
			if w.filter.Name != "" {
				return out, w.c.at[w.resource], w.c.changed, ErrLeft
			}
			// A watch of many objects (a namespace's) keeps going,
			// without the object: it may not read its state.
		default:
			// The log is in the order the copy took changes in, which
			// for what the node was served by another way
			// (observe.go) may be ahead of the view's own changes of
			// other objects: a change at or before the watch's version
			// is one it started past.
			if ch.rv > w.from {
				out = append(out, Change{Type: ch.typ, Object: ch.obj})
			}
		}
	}
	return out, w.c.at[w.resource], w.c.changed, nil
}
