package shard

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

func members(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "nodeproxy-" + strconv.Itoa(i)
	}
	return out
}

func TestOneMemberOrNoneIsUnsharded(t *testing.T) {
	for _, ms := range [][]string{nil, {"nodeproxy-0"}, {"nodeproxy-0", "nodeproxy-0", ""}} {
		tab := NewTable(ms)
		if !tab.Unsharded() {
			t.Errorf("%q: sharded", ms)
		}
		if got := tab.Held("nodeproxy-0").Len(); got != Ranges {
			t.Errorf("%q: nodeproxy-0 holds %d ranges, want all %d", ms, got, Ranges)
		}
		if got := tab.Owned("anyone").Len(); got != Ranges {
			t.Errorf("%q: owns %d ranges, want all", ms, got)
		}
	}
	if got := NewTable([]string{"nodeproxy-0"}).OwnerOf("node-1"); got != "nodeproxy-0" {
		t.Errorf("the one member does not own node-1: %q", got)
	}
}

// Every caller that knows the same members computes the same table.
func TestTableIsAFunctionOfItsMembers(t *testing.T) {
	a := NewTable([]string{"nodeproxy-2", "nodeproxy-0", "nodeproxy-1"})
	b := NewTable([]string{"nodeproxy-1", "nodeproxy-2", "nodeproxy-0", "nodeproxy-1"})
	if a.owner != b.owner || a.secondary != b.secondary || !slices.Equal(a.members, b.members) {
		t.Fatal("the same members in another order gave another table")
	}
}

func TestEveryRangeHasAnOwnerAndAnotherSecondary(t *testing.T) {
	for n := 2; n <= 7; n++ {
		tab := NewTable(members(n))
		bound := (Ranges + n - 1) / n
		owned, warm := map[string]int{}, map[string]int{}
		for r := range Ranges {
			o, s := tab.Owner(r), tab.Secondary(r)
			if o == "" || s == "" || o == s {
				t.Fatalf("%d members: range %d owner %q secondary %q", n, r, o, s)
			}
			owned[o]++
			warm[s]++
		}
		for _, m := range members(n) {
			if owned[m] > bound*115/100 || owned[m] < Ranges/n*85/100 || warm[m] > bound*115/100 {
				t.Errorf("%d members: %s owns %d and holds %d warm (bound %d)", n, m, owned[m], warm[m], bound)
			}
			if got := tab.Held(m).Len(); got != owned[m]+warm[m] {
				t.Errorf("%d members: %s holds %d ranges, owns %d and %d warm", n, m, got, owned[m], warm[m])
			}
		}
	}
}

// The balance: with 3 replicas, each replica's owned pods within
// 15% of a third, for 1,000 nodes whose pods vary from 1 (a GPU node) to
// 110 (a dense node).
func TestOwnedPodsEvenOutWithin15Percent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 20 {
		tab := NewTable(members(3))
		pods := map[string]int{}
		total := 0
		for i := range 1000 {
			name := "node-" + strconv.Itoa(trial) + "-" + strconv.Itoa(i)
			n := 1 + rng.IntN(60)
			if rng.IntN(10) == 0 {
				n = 110
			}
			pods[tab.OwnerOf(name)] += n
			total += n
		}
		for m, n := range pods {
			if dev := float64(n)/(float64(total)/3) - 1; dev > 0.15 || dev < -0.15 {
				t.Errorf("trial %d: %s owns %d of %d pods (%.1f%% off a third)", trial, m, n, total, 100*dev)
			}
		}
	}
}

// A member that leaves moves its ranges, and few others: the new owner
// of each of its ranges is the range's secondary, which held it warm.
func TestALeavingMemberMovesItsRangesToTheirSecondaries(t *testing.T) {
	for n := 3; n <= 6; n++ {
		before := NewTable(members(n))
		gone := members(n)[1]
		after := NewTable(append(members(n)[:1], members(n)[2:]...))
		moved, toSecondary, others := 0, 0, 0
		for r := range Ranges {
			switch {
			case before.Owner(r) == gone:
				moved++
				if after.Owner(r) == before.Secondary(r) {
					toSecondary++
				}
			case after.Owner(r) != before.Owner(r):
				others++
			}
		}
		if toSecondary != moved {
			t.Errorf("%d members: %d of the lost member's %d ranges went to their secondary", n, toSecondary, moved)
		}
		if others != 0 {
			t.Errorf("%d members: %d ranges of members still there changed owner", n, others)
		}
		t.Logf("%d members, one lost: %d ranges moved, %d to their secondary, %d others moved", n, moved, toSecondary, others)
	}
}

// A member that joins takes about its share, and the ranges it does not
// take stay where they were.
func TestAJoiningMemberTakesAboutItsShare(t *testing.T) {
	for n := 2; n <= 5; n++ {
		before, after := NewTable(members(n)), NewTable(members(n+1))
		newcomer := members(n + 1)[n]
		taken, others := 0, 0
		for r := range Ranges {
			switch {
			case after.Owner(r) == newcomer:
				taken++
			case after.Owner(r) != before.Owner(r):
				others++
			}
		}
		if others != 0 {
			t.Errorf("%d+1 members: %d ranges moved between members already there", n, others)
		}
		t.Logf("%d+1 members: the newcomer took %d ranges, %d others moved", n, taken, others)
	}
}
