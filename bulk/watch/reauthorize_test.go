package watch

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/component-base/metrics/testutil"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/bulk/internal/bulktest"
)

// TestRBACChangeAsksOnlyAboutTheUsersItNames: after a change reported for
// a user, the channels of that user are authorized again, and no other
// user's; one for a group asks about its members' channels only.
func TestRBACChangeAsksOnlyAboutTheUsersItNames(t *testing.T) {
	f, w := watcherFixture(t)
	var mu sync.Mutex
	asked := sets.New[string]()
	f.Allow(func(a authorizer.Attributes) bool {
		mu.Lock()
		defer mu.Unlock()
		asked.Insert(a.GetUser().GetName())
		return true
	})
	bob := &user.DefaultInfo{Name: "bob", Groups: []string{"devs", "system:authenticated"}}
	endpointSlices := v1alpha1.GetOperation{Resource: metav1.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}}
	open(t, w, bulktest.Admin, bulktest.GetOp("secrets", "a", metav1.ListOptions{}))
	open(t, w, bob, bulktest.GetOp("configmaps", "a", metav1.ListOptions{}))
	open(t, w, bulktest.NodeA, endpointSlices)
	rounds := func() float64 {
		v, err := testutil.GetCounterMetricValue(reauthorizationRounds.WithLabelValues(reasonRBACChange))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	planned := func() bool {
		w.reauthorizer.mu.Lock()
		defer w.reauthorizer.mu.Unlock()
		_, ok := w.reauthorizer.schedule.next()
		return ok
	}

	for _, tc := range []struct {
		name     string
		subjects Subjects
		want     []string
	}{
		{"a user", Subjects{Users: sets.New("bob")}, []string{"bob"}},
		{"a group", Subjects{Groups: sets.New(user.NodesGroup)}, []string{"system:node:node-a"}},
		{"nobody with a channel", Subjects{Users: sets.New("carol"), Groups: sets.New("ops")}, nil},
		{"everyone authenticated", Subjects{Groups: sets.New(user.AllAuthenticated)}, []string{"admin", "bob", "system:node:node-a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			asked.Clear()
			mu.Unlock()
			before := rounds()
			w.Recheck(tc.subjects, time.Now())
			// A round has ended (counted at its end) and none is left
			// planned: every user it names has been asked about.
			eventually(t, func() bool { return rounds() > before && !planned() })
			mu.Lock()
			defer mu.Unlock()
			if !asked.Equal(sets.New(tc.want...)) {
				t.Errorf("asked about the channels of %v, want %v", sets.List(asked), tc.want)
			}
		})
	}
}

// TestRecheckScheduleCoalescesBursts: each change plans a round per
// delay; changes within recheckCoalesce of a planned round join it; a
// round is never due before a change's delay has passed.
func TestRecheckScheduleCoalescesBursts(t *testing.T) {
	t0 := time.Unix(1000, 0)
	sec := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Second))) }
	who := func(names ...string) Subjects { return Subjects{Users: sets.New(names...)} }
	for _, tc := range []struct {
		name    string
		changes map[float64]Subjects // seen at, in seconds after t0
		want    []plannedRound       // at, in order
	}{
		{"one change: a round after each delay, plus the window", map[float64]Subjects{0: who("a")},
			[]plannedRound{{sec(12 + 5), who("a")}, {sec(62 + 5), who("a")}}},
		{"a burst within the window: one round per delay", map[float64]Subjects{0: who("a"), 1: who("b"), 4.5: who("c")},
			[]plannedRound{{sec(17), who("a", "b", "c")}, {sec(67), who("a", "b", "c")}}},
		{"a change past the window: rounds of its own", map[float64]Subjects{0: who("a"), 6: who("b")},
			[]plannedRound{{sec(17), who("a")}, {sec(23), who("b")}, {sec(67), who("a")}, {sec(73), who("b")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := recheckSchedule{delays: []time.Duration{12 * time.Second, 62 * time.Second}, coalesce: 5 * time.Second}
			for _, at := range sets.List(sets.KeySet(tc.changes)) {
				p.add(tc.changes[at], sec(at))
			}
			for _, want := range tc.want {
				next, ok := p.next()
				if !ok || !next.Equal(want.at) {
					t.Fatalf("next round at %s (%v), want %s", next.Sub(t0), ok, want.at.Sub(t0))
				}
				if _, early := p.due(want.at.Add(-time.Millisecond)); early {
					t.Fatalf("a round due before %s", want.at.Sub(t0))
				}
				got, ok := p.due(want.at)
				if !ok || !got.Users.Equal(want.subjects.Users) {
					t.Fatalf("round at %s asks about %v, want %v", want.at.Sub(t0), sets.List(got.Users), sets.List(want.subjects.Users))
				}
			}
			if next, ok := p.next(); ok {
				t.Errorf("a round left at %s", next.Sub(t0))
			}
		})
	}
}

// eventually polls cond until it holds; the bound only keeps a broken
// test from hanging.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
	}
}

// TestCheckThatCouldNotBeMadeIsAskedAgain: a channel whose check fails
// (kube-apiserver unreachable) is kept, and its user, only, is planned a
// round reauthorizeRetry later: with rounds only after changes, nothing
// else would ask before the connection's maximum age.
func TestCheckThatCouldNotBeMadeIsAskedAgain(t *testing.T) {
	f, w := watcherFixture(t)
	bob := &user.DefaultInfo{Name: "bob", Groups: []string{user.AllAuthenticated}}
	configmaps := open(t, w, bob, bulktest.GetOp("configmaps", "a", metav1.ListOptions{}))
	open(t, w, bulktest.Admin, bulktest.GetOp("secrets", "a", metav1.ListOptions{}))
	f.Allow(func(a authorizer.Attributes) bool { return a.GetUser().GetName() != "bob" })
	f.Fail(errors.New("kube-apiserver unreachable"))
	start := time.Now()
	w.reauthorizer.round(context.Background(), reasonRBACChange, Subjects{Users: sets.New("bob")}.Matches)
	f.Fail(nil)

	configmaps.mu.Lock()
	closed := configmaps.closed
	configmaps.mu.Unlock()
	if closed {
		t.Fatal("a channel whose check failed was closed")
	}
	w.reauthorizer.mu.Lock()
	rounds := slices.Clone(w.reauthorizer.schedule.rounds)
	w.reauthorizer.mu.Unlock()
	if len(rounds) != 1 || rounds[0].at.Before(start.Add(reauthorizeRetry)) || !rounds[0].subjects.Users.Equal(sets.New("bob")) || rounds[0].subjects.Groups.Len() != 0 {
		t.Fatalf("planned %+v, want one round over bob alone, %s after the failed one", rounds, reauthorizeRetry)
	}
	// That round, when it comes, ends the channel bob may no longer read.
	w.reauthorizer.round(context.Background(), reasonRBACChange, rounds[0].subjects.Matches)
	if got := configmaps.wait(t, 1); !strings.HasPrefix(got[0], "ERROR 403 access lost") {
		t.Errorf("at the retry: %v", got)
	}
}
