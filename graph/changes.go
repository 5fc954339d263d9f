package graph

// Change says that Node's reachability of Object changed in a write.
type Change struct {
	Node      string
	Object    ObjectRef
	Reachable bool // true: the node may now reach the object; false: no longer
}

// Observer receives the changes of one write, in the order they happened,
// on the writer's goroutine with the graph's write lock held: observers
// are called in write order, and the next write waits for them. An
// observer must therefore be quick (hand the changes to a queue, close a
// channel), must not write to the graph, and must not keep the slice,
// which is reused.
type Observer func([]Change)

// Observe registers o for every later write.
func (g *Graph) Observe(o Observer) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.observers = append(g.observers, o)
	g.changes.enabled = true
}

type changeKey struct {
	node string
	ref  ObjectRef
}

// changeLog collects, during one write, the (node, object) pairs whose
// reachability flipped at least once, with their state before the write.
// Its buffers are kept between writes, so a write with observers allocates
// only when it touches more pairs than any write before it.
type changeLog struct {
	enabled bool
	initial map[changeKey]bool
	order   []changeKey
	out     []Change
}

func (c *changeLog) touch(node string, ref ObjectRef, before bool) {
	if !c.enabled {
		return
	}
	k := changeKey{node, ref}
	if _, seen := c.initial[k]; seen {
		return
	}
	c.initial[k] = before
	c.order = append(c.order, k)
}

// flushLocked hands the write's net changes to the observers: pairs that
// flipped and flipped back (a pod replaced in place) are left out.
func (g *Graph) flushLocked() {
	c := &g.changes
	if len(c.order) == 0 {
		return
	}
	for _, k := range c.order {
		if now := g.Reachable(k.node, k.ref); now != c.initial[k] {
			c.out = append(c.out, Change{Node: k.node, Object: k.ref, Reachable: now})
		}
	}
	if len(c.out) > 0 {
		for _, o := range g.observers {
			o(c.out)
		}
	}
	clear(c.initial)
	c.order = c.order[:0]
	clear(c.out) // drop string references before reuse
	c.out = c.out[:0]
}
