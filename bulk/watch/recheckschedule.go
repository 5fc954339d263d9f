package watch

import (
	"slices"
	"time"
)

// recheckCoalesce is how long a round planned for an RBAC change waits
// for others to join it: a burst of changes (an apply of many bindings,
// the aggregation controller rewriting the ClusterRoles that aggregate a
// changed one) costs one round per window, not one per change, and each
// change's channels are asked at most this much later than its delay.
const recheckCoalesce = 5 * time.Second

// recheckSchedule plans the rounds that follow RBAC changes: each change
// asks for one round after each of its delays, with the subjects it
// names. Plain data, driven by the reauthorizer's one goroutine (under
// its lock) and by tests step by step.
type recheckSchedule struct {
	delays []time.Duration
	// coalesce is recheckCoalesce but in tests.
	coalesce time.Duration
	// rounds are in order of at.
	rounds []plannedRound
}

type plannedRound struct {
	at       time.Time
	subjects Subjects
}

// add plans, for a change seen at seen naming s, a round after each
// delay.
func (p *recheckSchedule) add(s Subjects, seen time.Time) {
	for _, d := range p.delays {
		p.plan(s, seen.Add(d))
	}
}

// plan asks for a round over s no earlier than at: joined to the first
// planned round due no earlier and at most coalesce later; else a round
// of its own, coalesce later, that later changes may join.
func (p *recheckSchedule) plan(s Subjects, at time.Time) {
	if i := p.search(at); i < len(p.rounds) && !p.rounds[i].at.After(at.Add(p.coalesce)) {
		p.rounds[i].subjects.union(s)
		return
	}
	var own Subjects
	own.union(s)
	at = at.Add(p.coalesce)
	p.rounds = slices.Insert(p.rounds, p.search(at), plannedRound{at: at, subjects: own})
}

// search is the index of the first round due no earlier than at.
func (p *recheckSchedule) search(at time.Time) int {
	i, _ := slices.BinarySearchFunc(p.rounds, at, func(r plannedRound, t time.Time) int { return r.at.Compare(t) })
	return i
}

// next is when the first planned round is due.
func (p *recheckSchedule) next() (time.Time, bool) {
	if len(p.rounds) == 0 {
		return time.Time{}, false
	}
	return p.rounds[0].at, true
}

// due takes the rounds due at now out of the plan, as one: the subjects
// of all of them.
func (p *recheckSchedule) due(now time.Time) (Subjects, bool) {
	var s Subjects
	n := 0
	for n < len(p.rounds) && !p.rounds[n].at.After(now) {
		s.union(p.rounds[n].subjects)
		n++
	}
	p.rounds = slices.Delete(p.rounds, 0, n)
	return s, n > 0
}
