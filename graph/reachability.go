package graph

// acquireLocked returns the entry of ref, creating it if needed, and counts
// one more holder of it.
func (g *Graph) acquireLocked(ref ObjectRef) *entry {
	s := g.shardOf(ref)
	s.mu.RLock()
	e := s.objects[ref]
	s.mu.RUnlock()
	if e == nil {
		e = &entry{ref: ref}
		s.mu.Lock()
		s.objects[ref] = e
		s.mu.Unlock()
		g.sizes[ref.Kind]++
	}
	e.holders++
	return e
}

// releaseLocked counts one holder less of e and removes it from its shard
// when none is left. By then every path through e has been taken away by
// the holder that made it.
func (g *Graph) releaseLocked(e *entry) {
	e.holders--
	if e.holders > 0 {
		return
	}
	s := g.shardOf(e.ref)
	s.mu.Lock()
	delete(s.objects, e.ref)
	s.mu.Unlock()
	g.sizes[e.ref.Kind]--
	delete(g.inherit, e)
}

// addPathsLocked adds delta (negative to remove) paths from e to node, and
// the same to every entry that inherits e's reachability.
func (g *Graph) addPathsLocked(e *entry, node string, delta int32) {
	if delta == 0 {
		return
	}
	s := g.shardOf(e.ref)
	s.mu.Lock()
	before := e.pathsShardLocked(node)
	e.addShardLocked(node, delta)
	s.mu.Unlock()
	after := before + delta
	if (before > 0) != (after > 0) {
		g.changes.touch(node, e.ref, before > 0)
	}
	for _, up := range g.inherit[e] {
		g.addPathsLocked(up, node, delta)
	}
}

// addShardLocked adjusts e's path count to node, keeping each node in one
// place: inline or in more.
func (e *entry) addShardLocked(node string, delta int32) {
	switch {
	case e.count > 0 && e.node == node:
		e.count += delta
		if e.count <= 0 {
			e.node, e.count = "", 0
		}
		return
	case e.more != nil:
		if c, ok := e.more[node]; ok {
			if c+delta <= 0 {
				delete(e.more, node)
				if len(e.more) == 0 {
					e.more = nil // give the memory back: most objects go back to one node
				}
			} else {
				e.more[node] = c + delta
			}
			return
		}
	}
	if delta < 0 {
		// Removing paths that were never added is a bug in the caller;
		// ignoring it keeps counts from going negative, which would grant
		// nothing but would poison later additions.
		return
	}
	if e.count == 0 {
		e.node, e.count = node, delta
		return
	}
	if e.more == nil {
		e.more = make(map[string]int32, 2)
	}
	e.more[node] = delta
}
