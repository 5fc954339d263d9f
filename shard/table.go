package shard

import (
	"slices"
)

// Table says, for each range, which member owns it and which holds it
// warm. Members are hub replicas by their stable names (a StatefulSet's
// pod names). A Table is immutable.
type Table struct {
	members []string
	// owner and secondary index members; -1 is nobody.
	owner, secondary [Ranges]int16
}

// NewTable assigns every range to the two members of highest rendezvous
// weight for it: the first owns it, the second holds it warm. members
// may come in any order and repeat; empty names are ignored.
//
// Plain rendezvous moves nothing but what must move: a member that
// leaves gives each of its ranges to the range's secondary (the next in
// the range's order, which held it warm), and a member that joins takes
// ranges from the others and nothing else changes owner. Its balance is
// statistical: a member's share of Ranges ranges is off by
// sqrt((N-1)/Ranges) of itself (one standard deviation), 2.2% for 3
// members; a bounded assignment would be exact, but moves ranges that
// the lost member did not own to replicas that do not hold them.
func NewTable(members []string) *Table {
	ms := slices.Clone(members)
	ms = slices.DeleteFunc(ms, func(m string) bool { return m == "" })
	slices.Sort(ms)
	ms = slices.Compact(ms)
	t := &Table{members: ms}
	seeds := make([]uint64, len(ms))
	for i, m := range ms {
		seeds[i] = Hash(m)
	}
	for r := range Ranges {
		first, second := -1, -1
		var w1, w2 uint64
		for i, seed := range seeds {
			w := weight(seed, r)
			switch {
			case first < 0 || w > w1:
				first, second, w1, w2 = i, first, w, w1
			case second < 0 || w > w2:
				second, w2 = i, w
			}
		}
		t.owner[r], t.secondary[r] = int16(first), int16(second)
	}
	return t
}

// weight is member's rendezvous weight for range r: a 64-bit mix
// (splitmix64's finalizer) of the member's hash and the range, so that
// each range orders the members independently of every other range.
func weight(member uint64, r int) uint64 {
	return mix(member + uint64(r+1)*0x9e3779b97f4a7c15)
}

// Members are the table's members, sorted.
func (t *Table) Members() []string { return slices.Clone(t.members) }

// Unsharded reports whether the table has fewer than two members: one
// replica holds every node, as the hub does unsharded.
func (t *Table) Unsharded() bool { return len(t.members) < 2 }

// Owner is the member that serves range r's nodes, or "" with no members.
func (t *Table) Owner(r int) string { return t.name(t.owner[r]) }

// Secondary is the member that holds range r warm for its owner, or ""
// with fewer than two members.
func (t *Table) Secondary(r int) string { return t.name(t.secondary[r]) }

// OwnerOf is the member that serves node.
func (t *Table) OwnerOf(node string) string { return t.Owner(Range(node)) }

// Serving is the member that serves node now: its owner if ready, else
// its secondary if ready (which holds the range warm), else "": no ready
// replica holds the node, and its endpoint reads from kube-apiserver
// until one does.
func (t *Table) Serving(node string, ready func(member string) bool) string {
	r := Range(node)
	for _, m := range []string{t.Owner(r), t.Secondary(r)} {
		if m != "" && ready(m) {
			return m
		}
	}
	return ""
}

func (t *Table) name(i int16) string {
	if i < 0 {
		return ""
	}
	return t.members[i]
}

// Holds reports whether member owns node's range or holds it warm:
// Held(member).HasNode(node), without making the set.
func (t *Table) Holds(member, node string) bool {
	r := Range(node)
	return t.Unsharded() || t.Owner(r) == member || t.Secondary(r) == member
}

// Held are the ranges member owns or holds warm: what its cache keeps.
// With fewer than two members every range is held.
func (t *Table) Held(member string) Set {
	var s Set
	for r := range Ranges {
		if t.Unsharded() || t.Owner(r) == member || t.Secondary(r) == member {
			s.add(r)
		}
	}
	return s
}

// Owned are the ranges member owns: the nodes it serves.
func (t *Table) Owned(member string) Set {
	var s Set
	for r := range Ranges {
		if t.Unsharded() || t.Owner(r) == member {
			s.add(r)
		}
	}
	return s
}

// Set is a set of ranges.
type Set [Ranges / 64]uint64

// All is every range.
func All() Set {
	var s Set
	for i := range s {
		s[i] = ^uint64(0)
	}
	return s
}

func (s *Set) add(r int) { s[r/64] |= 1 << (r % 64) }

// NodesSet is the set of the ranges nodes fall in.
func NodesSet(nodes ...string) Set {
	var s Set
	for _, n := range nodes {
		s.add(Range(n))
	}
	return s
}

// Has reports whether r is in the set.
func (s Set) Has(r int) bool { return s[r/64]&(1<<(r%64)) != 0 }

// HasNode reports whether node's range is in the set.
func (s Set) HasNode(node string) bool { return s.Has(Range(node)) }

// Len is how many ranges the set has.
func (s Set) Len() int {
	n := 0
	for r := range Ranges {
		if s.Has(r) {
			n++
		}
	}
	return n
}

// Union is the ranges in s or other.
func (s Set) Union(other Set) Set {
	for i := range s {
		s[i] |= other[i]
	}
	return s
}

// Minus is the ranges of s that other lacks.
func (s Set) Minus(other Set) Set {
	var out Set
	for i := range s {
		out[i] = s[i] &^ other[i]
	}
	return out
}
