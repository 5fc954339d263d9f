package graph

// nodeIDLocked returns the dense id of node, assigning the next one on
// first sight. Ids are never reused, so a reader holding an id can never
// be answered for another node; the table grows with every node name ever
// seen, a few dozen bytes each.
func (g *Graph) nodeIDLocked(node string) uint32 {
	if n := g.nodes.get(node); n != nil {
		return n.id
	}
	n := &nodeEntry{name: node, id: uint32(len(g.names))}
	g.names = append(g.names, node)
	g.nodes.insert(n)
	return n.id
}

// acquireLocked returns the entry of ref, creating it if needed, and counts
// one more holder of it.
func (g *Graph) acquireLocked(ref ObjectRef) *entry {
	e := g.objects.get(ref)
	if e == nil {
		e = &entry{ns: ref.Namespace, name: ref.Name, kind: ref.Kind}
		g.objects.insert(e)
		g.sizes[ref.Kind].Add(1)
		objects.WithLabelValues(kindNames[ref.Kind]).Inc()
	}
	e.holders++
	return e
}

// releaseLocked counts one holder less of e and drops it when none is
// left. By then every path through e has been taken away by the holder
// that made it, so readers that still find e see it unreachable.
func (g *Graph) releaseLocked(e *entry) {
	e.holders--
	if e.holders > 0 {
		return
	}
	if e.reach.Load() == manyNodes { // cannot happen when paths were balanced
		m := g.multi.get(e)
		g.multi.remove(m)
		m.dropLocked()
	}
	e.reach.Store(0)
	g.objects.remove(e)
	g.sizes[e.kind].Add(-1)
	objects.WithLabelValues(kindNames[e.kind]).Dec()
	delete(g.claimPVs, e)
	delete(g.pods, e)
	delete(g.pvs, e)
}

// pathsLocked returns the number of paths from e to node id.
func (g *Graph) pathsLocked(e *entry, id uint32) int32 {
	switch r := e.reach.Load(); r {
	case 0:
		return 0
	case manyNodes:
		return g.multi.get(e).pathsLocked(id)
	default:
		if r == id+1 {
			return e.count
		}
		return 0
	}
}

// eachNodeLocked calls f for every node e reaches, with its path count,
// in node id order so that changes come out in a repeatable order.
func (g *Graph) eachNodeLocked(e *entry, f func(id uint32, paths int32)) {
	switch r := e.reach.Load(); r {
	case 0:
	case manyNodes:
		g.multi.get(e).eachLocked(f)
	default:
		f(r-1, e.count)
	}
}

// addPathsLocked adds delta (negative to remove) paths from e to node id,
// and the same to every object reachable wherever e is: the PVs bound to
// a claim, the secrets of a PV.
func (g *Graph) addPathsLocked(e *entry, id uint32, delta int32) {
	if delta == 0 {
		return
	}
	before := g.pathsLocked(e, id)
	// Removing more paths than were added would be a bug in the caller;
	// clamping keeps it from poisoning later additions.
	after := max(before+delta, 0)
	g.setPathsLocked(e, id, after)
	if (before > 0) != (after > 0) {
		g.changes.touch(g.names[id], e.ref(), before > 0)
	}
	switch e.kind {
	case PersistentVolumeClaim:
		for _, pv := range g.claimPVs[e] {
			g.addPathsLocked(pv.self, id, delta)
		}
	case PersistentVolume:
		if pv := g.pvs[e]; pv != nil {
			for _, s := range pv.secrets {
				g.addPathsLocked(s, id, delta)
			}
		}
	}
}

// setPathsLocked records that e has paths paths to node id, moving e
// between the one-node and many-node forms. The order of stores is what
// keeps readers right: a multiReach is published before reach says
// manyNodes, and reach says the single node before the multiReach goes.
func (g *Graph) setPathsLocked(e *entry, id uint32, paths int32) {
	switch r := e.reach.Load(); {
	case r == manyNodes:
		m := g.multi.get(e)
		m.setPathsLocked(id, paths)
		if m.n == 1 {
			only, c := m.onlyLocked()
			e.count = c
			e.reach.Store(only + 1)
			g.multi.remove(m)
			m.dropLocked()
		}
	case r == 0:
		if paths > 0 {
			e.count = paths
			e.reach.Store(id + 1)
		}
	case r == id+1:
		if paths > 0 {
			e.count = paths
		} else {
			e.count = 0
			e.reach.Store(0)
		}
	default: // one other node reaches e
		if paths > 0 {
			m := newMultiReachLocked(e, r-1, id, e.count, paths)
			g.multi.insert(m)
			e.reach.Store(manyNodes)
			e.count = 0
		}
	}
}
