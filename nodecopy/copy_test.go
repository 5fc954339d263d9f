package nodecopy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

var (
	secrets = v1alpha1.NodeViewTypeIndex("secrets")
	pods    = v1alpha1.NodeViewTypeIndex("pods")
)

func obj(kind, ns, name string, rv int, extra string) []byte {
	api := "v1"
	meta := fmt.Sprintf(`"name":%q,"resourceVersion":"%d"`, name, rv)
	if ns != "" {
		meta += fmt.Sprintf(`,"namespace":%q`, ns)
	}
	return []byte(fmt.Sprintf(`{"apiVersion":%q,"kind":%q,"metadata":{%s}%s}`, api, kind, meta, extra))
}

func secret(name string, rv int) []byte { return obj("Secret", "ns", name, rv, "") }

func pod(name, node string, rv int) []byte {
	return obj("Pod", "ns", name, rv, fmt.Sprintf(`,"spec":{"nodeName":%q}`, node))
}

// position is a position with every type at rv but those of at.
func position(rv int, at map[string]int) string {
	var p v1alpha1.NodeViewPosition
	for i, t := range v1alpha1.NodeViewTypes {
		v := rv
		if a, ok := at[t.Resource]; ok {
			v = a
		}
		p.Since[i], p.At[i] = uint64(v), uint64(v)
	}
	return p.String()
}

func names(objs []*Object) string {
	var s []string
	for _, o := range objs {
		s = append(s, fmt.Sprintf("%s@%d", o.Name, o.RV))
	}
	return strings.Join(s, " ")
}

func mustApply(t *testing.T, c *Copy, b Batch) {
	t.Helper()
	refused, err := c.Apply(b)
	if err != nil || len(refused) > 0 {
		t.Fatalf("apply: refused %v, error %v", refused, err)
	}
}

func TestAppliedBatchesAreWhatListsRead(t *testing.T) {
	c := New("node-a")
	if _, _, err := c.List(secrets, Filter{}); !errors.Is(err, ErrNoView) {
		t.Fatalf("an empty copy listed: %v, want ErrNoView", err)
	}
	mustApply(t, c, Batch{Initial: true, Position: position(10, nil), Events: []Event{
		{watch.Added, secret("b", 5)}, {watch.Added, secret("a", 7)}, {watch.Added, pod("p", "node-a", 9)},
	}})
	mustApply(t, c, Batch{Position: position(20, nil), Events: []Event{
		{watch.Modified, secret("a", 12)}, {v1alpha1.NodeViewEntered, secret("c", 3)},
		{watch.Deleted, secret("b", 15)}, {watch.Added, pod("q", "node-a", 18)},
	}})
	got, rv, err := c.List(secrets, Filter{Namespace: "ns"})
	if err != nil || rv != 20 || names(got) != "a@12 c@3" {
		t.Fatalf("secrets: %q at %d (%v), want a@12 c@3 at 20", names(got), rv, err)
	}
	got, _, _ = c.List(pods, Filter{Fields: fields.OneTermEqualSelector("spec.nodeName", "node-a")})
	if names(got) != "p@9 q@18" {
		t.Fatalf("pods: %q", names(got))
	}
	o, _, _ := c.Get(secrets, "ns", "b")
	if o != nil {
		t.Fatalf("a deleted secret read: %+v", o)
	}
}

func TestObjectsOutsideTheViewAreRefused(t *testing.T) {
	c := New("node-a")
	refused, err := c.Apply(Batch{Initial: true, Position: position(10, nil), Events: []Event{
		{watch.Added, pod("theirs", "node-b", 5)}, {watch.Added, obj("Node", "", "node-b", 6, "")},
		{watch.Added, obj("Node", "", "node-a", 7, "")}, {watch.Added, []byte(`{"kind":"Secret"`)},
		{watch.Added, obj("Deployment", "ns", "d", 8, "")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(refused) != 4 || !errors.Is(refused[0], ErrOutsideView) || !errors.Is(refused[1], ErrOutsideView) {
		t.Fatalf("refused %v, want the other node's pod and Node, the truncated object and the deployment", refused)
	}
	if c.Len() != 1 {
		t.Fatalf("the copy holds %d objects, want the node's own Node", c.Len())
	}
}

func TestABatchThatGoesBackIsRefusedWhole(t *testing.T) {
	c := New("node-a")
	mustApply(t, c, Batch{Initial: true, Position: position(10, nil), Events: []Event{{watch.Added, secret("a", 5)}}})
	if _, err := c.Apply(Batch{Position: position(10, map[string]int{"secrets": 9}), Events: []Event{{watch.Deleted, secret("a", 9)}}}); err == nil {
		t.Fatal("a position going back was applied")
	}
	if _, err := c.Apply(Batch{Position: "secrets=12", Events: []Event{{watch.Deleted, secret("a", 12)}}}); err == nil {
		t.Fatal("a position without every type was applied")
	}
	if o, _, _ := c.Get(secrets, "ns", "a"); o == nil {
		t.Fatal("a refused batch changed the copy")
	}
}

// TestAResumeOnAReplicaBehindOnAQuietTypeIsTaken: the serving replica
// bookmarked runtime classes, which nobody changes, at its own watch's
// bookmark (812); the replica the view resumes on has not had its own
// bookmark yet (790). No change lies between the last one (700) and
// either, so the resume's first bookmark, at 790, is a position the copy
// holds: it is taken, it is the copy's next resume point, and the copy
// goes on answering at 812, never back. A position before the last change
// the copy has taken in (before 700) would go back, and is refused.
func TestAResumeOnAReplicaBehindOnAQuietTypeIsTaken(t *testing.T) {
	runtimeClasses := v1alpha1.NodeViewTypeIndex("runtimeclasses")
	span := func(since, at int, others int) string {
		var p v1alpha1.NodeViewPosition
		for i := range p.At {
			p.Since[i], p.At[i] = uint64(others), uint64(others)
		}
		p.Since[runtimeClasses], p.At[runtimeClasses] = uint64(since), uint64(at)
		return p.String()
	}
	c := New("node-a")
	mustApply(t, c, Batch{Initial: true, Position: span(700, 812, 812), Events: []Event{{watch.Added, secret("a", 5)}}})
	w, err := c.WatchFrom(secrets, Filter{}, 812)
	if err != nil {
		t.Fatal(err)
	}
	resumed := Batch{Position: span(700, 790, 815), Events: []Event{{watch.Modified, secret("a", 815)}}}
	if refused, err := c.Apply(resumed); err != nil || len(refused) > 0 {
		t.Fatalf("the resume's first bookmark, on a replica behind on a quiet type: refused %v, %v; want it taken", refused, err)
	}
	if pos, _ := c.Position(); pos != resumed.Position {
		t.Errorf("the copy resumes from %s; want the replica's position %s", pos, resumed.Position)
	}
	if at, _ := c.At(runtimeClasses); at != 812 {
		t.Errorf("runtime classes answered at %d; want 812: the versions the copy answers at never go back", at)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if changes, _, err := w.Next(ctx); err != nil || describe(changes) != "MODIFIED a@815" {
		t.Errorf("a watch across the resume: %q, %v; want the change", describe(changes), err)
	}
	if _, err := c.Apply(Batch{Position: span(600, 650, 816)}); !errors.Is(err, ErrGoesBack) {
		t.Errorf("a position before the last change of runtime classes the copy holds: %v; want ErrGoesBack", err)
	}
}

func TestWatchesResumeFromAResourceVersion(t *testing.T) {
	c := New("node-a")
	mustApply(t, c, Batch{Initial: true, Position: position(10, nil), Events: []Event{{watch.Added, secret("a", 5)}}})
	mustApply(t, c, Batch{Position: position(20, nil), Events: []Event{{watch.Modified, secret("a", 12)}, {watch.Added, secret("b", 15)}}})
	mustApply(t, c, Batch{Position: position(30, nil), Events: []Event{{watch.Modified, secret("a", 25)}}})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tc := range []struct {
		from   uint64
		filter Filter
		want   string
	}{
		{10, Filter{}, "MODIFIED a@12, ADDED b@15, MODIFIED a@25"},
		{12, Filter{}, "ADDED b@15, MODIFIED a@25"},
		{20, Filter{Name: "a", Namespace: "ns"}, "MODIFIED a@25"},
		{12, Filter{Name: "b", Namespace: "ns"}, "ADDED b@15"},
	} {
		w, err := c.WatchFrom(secrets, tc.filter, tc.from)
		if err != nil {
			t.Fatal(err)
		}
		changes, _, err := w.Next(ctx)
		if err != nil || describe(changes) != tc.want {
			t.Errorf("from %d %+v: %q (%v), want %q", tc.from, tc.filter, describe(changes), err, tc.want)
		}
	}
	if _, err := c.WatchFrom(secrets, Filter{}, 9); !errors.Is(err, ErrExpired) {
		t.Errorf("a watch from before the copy's log: %v, want ErrExpired", err)
	}
	// One object by name, from before the log: its current state if it
	// changed since, nothing if not; a missing one cannot say.
	w, err := c.WatchFrom(secrets, Filter{Namespace: "ns", Name: "a"}, 9)
	if err != nil {
		t.Fatal(err)
	}
	if changes, _, err := w.Next(ctx); err != nil || describe(changes) != "MODIFIED a@25" {
		t.Errorf("a by name from 9: %q, %v; want its current state", describe(changes), err)
	}
	c = New("node-a") // its log begins at 40
	mustApply(t, c, Batch{Initial: true, Position: position(40, nil), Events: []Event{{watch.Added, secret("a", 25)}}})
	w, err = c.WatchFrom(secrets, Filter{Namespace: "ns", Name: "a"}, 30)
	if err != nil || w.pending != nil {
		t.Errorf("a by name from 30, unchanged since 25: pending %v, %v; want nothing", w, err)
	}
	if _, err := c.WatchFrom(secrets, Filter{Namespace: "ns", Name: "b"}, 30); !errors.Is(err, ErrExpired) {
		t.Errorf("b, gone, by name from before the log: %v, want ErrExpired", err)
	}
}

// An object entering the view (its first pod arrived) is not a change of
// the object: a watch from its version or later, which kube-apiserver
// would send nothing for it, gets nothing; one from before gets it ADDED.
func TestAnObjectEnteringTheViewIsNoChangeAfterItsVersion(t *testing.T) {
	c := New("node-a")
	mustApply(t, c, Batch{Initial: true, Position: position(2, nil)})
	mustApply(t, c, Batch{Position: position(20, nil), Events: []Event{{v1alpha1.NodeViewEntered, secret("c", 5)}}})
	mustApply(t, c, Batch{Position: position(30, nil), Events: []Event{{watch.Modified, secret("c", 25)}}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for from, want := range map[uint64]string{2: "ADDED c@5, MODIFIED c@25", 5: "MODIFIED c@25", 12: "MODIFIED c@25"} {
		w, err := c.WatchFrom(secrets, Filter{Namespace: "ns", Name: "c"}, from)
		if err != nil {
			t.Fatal(err)
		}
		var got []Change
		for len(got) == 0 || got[len(got)-1].Object.RV != 25 {
			changes, _, err := w.Next(ctx)
			if err != nil {
				t.Fatalf("from %d: %v after %q", from, err, describe(got))
			}
			got = append(got, changes...)
		}
		if describe(got) != want {
			t.Errorf("c by name from %d: %q, want %q", from, describe(got), want)
		}
	}
}

func describe(changes []Change) string {
	var s []string
	for _, ch := range changes {
		s = append(s, fmt.Sprintf("%s %s@%d", ch.Type, ch.Object.Name, ch.Object.RV))
	}
	return strings.Join(s, ", ")
}

func TestAWatchedObjectThatLeavesEndsItsWatch(t *testing.T) {
	c := New("node-a")
	mustApply(t, c, Batch{Initial: true, Position: position(10, nil), Events: []Event{{watch.Added, secret("a", 5)}, {watch.Added, secret("b", 6)}}})
	byName, err := c.WatchFrom(secrets, Filter{Namespace: "ns", Name: "a"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := c.WatchFrom(secrets, Filter{Namespace: "ns"}, 10)
	mustApply(t, c, Batch{Position: position(20, nil), Events: []Event{
		{watch.Modified, secret("a", 12)}, {v1alpha1.NodeViewLeft, secret("a", 20)}, {watch.Modified, secret("b", 14)},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	changes, _, err := byName.Next(ctx)
	if describe(changes) != "MODIFIED a@12" || !errors.Is(err, ErrLeft) {
		t.Fatalf("by name: %q, %v; want the change before it left, then ErrLeft", describe(changes), err)
	}
	changes, _, err = all.Next(ctx)
	if describe(changes) != "MODIFIED a@12, MODIFIED b@14" || err != nil {
		t.Fatalf("the namespace: %q, %v; want both changes, nothing of a after it left", describe(changes), err)
	}
}

// TestAViewOpenedAfreshIsTheWatchesDifference: the hub could not resume
// the copy and sent the view whole; the copy's watches see the
// difference, in the view's order, rather than 410.
func TestAViewOpenedAfreshIsTheWatchesDifference(t *testing.T) {
	c := New("node-a")
	mustApply(t, c, Batch{Initial: true, Position: position(10, nil), Events: []Event{
		{watch.Added, secret("a", 5)}, {watch.Added, secret("gone", 6)}, {watch.Added, secret("same", 7)},
		{watch.Added, pod("p", "node-a", 8)}, {watch.Added, pod("old", "node-a", 9)},
	}})
	ws, _, _, err := c.WatchInitial(secrets, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	wp, _, _, _ := c.WatchInitial(pods, Filter{})
	byName, _ := c.WatchFrom(secrets, Filter{Namespace: "ns", Name: "gone"}, 10)
	mustApply(t, c, Batch{Initial: true, Position: position(40, nil), Events: []Event{
		{watch.Added, secret("a", 35)}, {watch.Added, secret("same", 7)}, {watch.Added, secret("new", 36)},
		{watch.Added, pod("p", "node-a", 38)},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	changes, _, err := ws.Next(ctx)
	got := describe(changes)
	if err != nil || !strings.Contains(got, "MODIFIED a@35") || !strings.Contains(got, "ADDED new@36") || strings.Contains(got, "same") || strings.Contains(got, "gone") {
		t.Errorf("the secrets: %q, %v; want a modified and new added, nothing of same, and gone left unseen", got, err)
	}
	if changes, _, err := byName.Next(ctx); len(changes) != 0 || !errors.Is(err, ErrLeft) {
		t.Errorf("a watch of the gone secret by name: %q, %v; want ErrLeft", describe(changes), err)
	}
	changes, _, err = wp.Next(ctx)
	if got := describe(changes); err != nil || got != "MODIFIED p@38, DELETED old@40" {
		t.Errorf("the pods: %q, %v; want p modified, old deleted at the new position", got, err)
	}
	if !strings.Contains(string(changes[1].Object.Raw), `"resourceVersion":"40"`) {
		t.Errorf("the deleted pod's object says %s, want the new position's version", changes[1].Object.Raw)
	}

	// A view afresh from a replica behind the copy is refused whole: the
	// copy goes back on nothing, and its watches see nothing.
	if _, err := c.Apply(Batch{Initial: true, Position: position(30, nil), Events: []Event{{watch.Added, secret("a", 25)}}}); !errors.Is(err, ErrBehind) {
		t.Errorf("a view afresh behind the copy: %v, want ErrBehind", err)
	}
	got2, at, _ := c.List(secrets, Filter{})
	if names(got2) != "a@35 new@36 same@7" || at != 40 {
		t.Errorf("after a view afresh behind the copy: %q at %d, want a@35 new@36 same@7 at 40", names(got2), at)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if changes, _, err := ws.Next(short); len(changes) != 0 {
		t.Errorf("a watch across a view behind the copy: %q, %v; want nothing", describe(changes), err)
	}
}

// TestAViewAfreshBehindTheCopyBringsBackNothingDeleted: a replica behind
// the copy (its store of secrets from before a deletion the copy took
// in) sends a view afresh that still holds the deleted secret; the copy
// must not serve it again.
func TestAViewAfreshBehindTheCopyBringsBackNothingDeleted(t *testing.T) {
	c := New("node-a")
	mustApply(t, c, Batch{Initial: true, Position: position(10, nil), Events: []Event{
		{watch.Added, secret("x", 5)}, {watch.Added, pod("p", "node-a", 8)},
	}})
	mustApply(t, c, Batch{Position: position(20, nil), Events: []Event{{watch.Deleted, secret("x", 15)}}})
	w, err := c.WatchFrom(secrets, Filter{Namespace: "ns"}, 20)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Apply(Batch{Initial: true, Position: position(12, nil), Events: []Event{
		{watch.Added, secret("x", 5)}, {watch.Added, pod("p", "node-a", 8)},
	}})
	if got, _, _ := c.List(secrets, Filter{Namespace: "ns"}); len(got) != 0 {
		t.Errorf("secrets after a view afresh from a replica behind a deletion: %q, want none", names(got))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if changes, _, _ := w.Next(ctx); len(changes) != 0 {
		t.Errorf("a watch from after the deletion saw %q, want nothing", describe(changes))
	}
}

func TestTheLogKeepsItsBound(t *testing.T) {
	c := New("node-a")
	mustApply(t, c, Batch{Initial: true, Position: position(1, nil)})
	old, _ := c.WatchFrom(secrets, Filter{}, 1)
	for rv := 2; rv < maxLog+100; rv++ {
		mustApply(t, c, Batch{Position: position(rv, nil), Events: []Event{{watch.Modified, secret("a", rv)}}})
	}
	if _, _, err := old.Next(context.Background()); !errors.Is(err, ErrExpired) {
		t.Fatalf("a watch behind the log: %v, want ErrExpired", err)
	}
	if _, err := c.WatchFrom(secrets, Filter{}, 50); !errors.Is(err, ErrExpired) {
		t.Fatalf("a watch from an evicted version: %v", err)
	}
	if len(c.log.changes) > maxLog {
		t.Fatalf("the log holds %d changes, more than %d", len(c.log.changes), maxLog)
	}
}

func TestAwaitSeesTheChangeItWaitsFor(t *testing.T) {
	c := New("node-a")
	mustApply(t, c, Batch{Initial: true, Position: position(10, nil)})
	atLeast := func(rv uint64) func() bool {
		return func() bool { at, _ := c.At(secrets); return at >= rv }
	}
	if !c.Await(context.Background(), atLeast(10)) {
		t.Fatal("a condition that holds was awaited")
	}
	done := make(chan bool)
	go func() { done <- c.Await(context.Background(), atLeast(20)) }()
	mustApply(t, c, Batch{Position: position(15, nil)})
	mustApply(t, c, Batch{Position: position(20, nil)})
	if !<-done {
		t.Fatal("the wait for version 20 ended without it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if c.Await(ctx, atLeast(30)) {
		t.Fatal("a version the copy never reached was awaited")
	}
}
