package nodecopy

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

// next reads what w has now, waiting at most a moment.
func next(t *testing.T, w *Watch) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	changes, _, _ := w.Next(ctx)
	return describe(changes)
}

func TestAStateServedElsewhereIsNeverTakenBack(t *testing.T) {
	c := New("node-a")
	mustApply(t, c, Batch{Initial: true, Position: position(10, nil), Events: []Event{{watch.Added, secret("x", 5)}}})
	w, err := c.WatchFrom(secrets, Filter{Namespace: "ns", Name: "x"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	// kube-apiserver served x@25 while the hub was away.
	if refused, n, _ := c.Observe([]Observed{{watch.Modified, secret("x", 25)}}); len(refused) > 0 || n != 1 {
		t.Fatalf("observe: refused %v, %d changed", refused, n)
	}
	if got := next(t, w); got != "MODIFIED x@25" {
		t.Errorf("a watch of x: %q, want MODIFIED x@25", got)
	}
	// The hub, behind, sends x@18 later: older than what was served.
	mustApply(t, c, Batch{Position: position(20, nil), Events: []Event{{watch.Modified, secret("x", 18)}, {watch.Modified, secret("x", 25)}}})
	if got, _, _ := c.List(secrets, Filter{Namespace: "ns"}); names(got) != "x@25" {
		t.Errorf("secrets: %q, want x@25", names(got))
	}
	if got := next(t, w); got != "" {
		t.Errorf("a watch of x after the hub's older states: %q, want nothing", got)
	}
	mustApply(t, c, Batch{Position: position(30, nil), Events: []Event{{watch.Modified, secret("x", 28)}}})
	if got := next(t, w); got != "MODIFIED x@28" {
		t.Errorf("a watch of x after the hub's newer state: %q, want MODIFIED x@28", got)
	}
	// An observation older than the copy's changes nothing.
	if _, n, _ := c.Observe([]Observed{{watch.Modified, secret("x", 25)}}); n != 0 {
		t.Errorf("an older observation changed the copy")
	}
}

func TestADeletionServedElsewhereIsNeverUndone(t *testing.T) {
	c := New("node-a")
	mustApply(t, c, Batch{Initial: true, Position: position(10, nil), Events: []Event{
		{watch.Added, pod("p", "node-a", 8)}, {watch.Added, pod("q", "node-a", 9)},
	}})
	w, _, _, err := c.WatchInitial(pods, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	// kube-apiserver served p's deletion at 30.
	c.Observe([]Observed{{watch.Deleted, pod("p", "node-a", 30)}})
	if got := next(t, w); got != "DELETED p@30" {
		t.Errorf("a watch of the pods: %q, want DELETED p@30", got)
	}
	// The hub resumes from before it: p's last update, then its deletion.
	mustApply(t, c, Batch{Position: position(20, nil), Events: []Event{{watch.Modified, pod("p", "node-a", 18)}}})
	if got, _, _ := c.List(pods, Filter{}); names(got) != "q@9" {
		t.Errorf("pods after the hub's older state of p: %q, want q@9", names(got))
	}
	// A view afresh from a replica past the copy's position but before
	// the deletion: p does not come back.
	mustApply(t, c, Batch{Initial: true, Position: position(25, nil), Events: []Event{
		{watch.Added, pod("p", "node-a", 18)}, {watch.Added, pod("q", "node-a", 9)},
	}})
	if got, _, _ := c.List(pods, Filter{}); names(got) != "q@9" {
		t.Errorf("pods after a view afresh from before the deletion: %q, want q@9", names(got))
	}
	mustApply(t, c, Batch{Position: position(35, nil), Events: []Event{{watch.Deleted, pod("p", "node-a", 30)}}})
	if got := next(t, w); got != "" {
		t.Errorf("a watch of the pods after the hub caught up: %q, want nothing", got)
	}
	if g := c.Gones(); len(g) != 0 {
		t.Errorf("deletions kept past the copy's version: %v", g)
	}
	// A pod created again under the name is a new one.
	mustApply(t, c, Batch{Position: position(40, nil), Events: []Event{{watch.Added, pod("p", "node-a", 38)}}})
	if got, _, _ := c.List(pods, Filter{}); names(got) != "p@38 q@9" {
		t.Errorf("pods after p was created again: %q, want p@38 q@9", names(got))
	}
}

func TestAListServedElsewhereIsTheWholeOfWhatItSelects(t *testing.T) {
	c := New("node-a")
	mustApply(t, c, Batch{Initial: true, Position: position(10, nil), Events: []Event{
		{watch.Added, pod("p", "node-a", 8)}, {watch.Added, pod("q", "node-a", 9)}, {watch.Added, secret("s", 4)},
	}})
	onNode := Filter{Fields: fields.OneTermEqualSelector("spec.nodeName", "node-a")}
	refused, n, _ := c.ObserveList(pods, onNode, 30, [][]byte{pod("q", "node-a", 9), pod("r", "node-a", 28)})
	if len(refused) > 0 || n != 2 {
		t.Fatalf("observe the list: refused %v, %d changed, want 2 (r added, p deleted)", refused, n)
	}
	if got, _, _ := c.List(pods, Filter{}); names(got) != "q@9 r@28" {
		t.Errorf("pods: %q, want q@9 r@28", names(got))
	}
	// A list of one secret by name that comes back empty: gone at its
	// version, even where the copy never held it.
	c.ObserveList(secrets, Filter{Namespace: "ns", Name: "s"}, 31, nil)
	c.ObserveList(secrets, Filter{Namespace: "ns", Name: "t"}, 31, nil)
	mustApply(t, c, Batch{Position: position(20, nil), Events: []Event{
		{watch.Modified, pod("p", "node-a", 12)}, {watch.Added, secret("t", 15)}, {watch.Modified, secret("s", 16)},
	}})
	if got, _, _ := c.List(secrets, Filter{}); len(got) != 0 {
		t.Errorf("secrets: %q, want none", names(got))
	}
	if got, _, _ := c.List(pods, Filter{}); names(got) != "q@9 r@28" {
		t.Errorf("pods after the hub's older states: %q, want q@9 r@28", names(got))
	}
	// What the node may not have is refused, as from the hub.
	if refused, _, _ := c.Observe([]Observed{{watch.Added, pod("o", "node-b", 40)}}); len(refused) != 1 {
		t.Errorf("a pod of another node: refused %v", refused)
	}
}

func TestTheDeletionsSeenElsewhereAreKeptWithThePersistedCopy(t *testing.T) {
	c := New("node-a")
	mustApply(t, c, Batch{Initial: true, Position: position(10, nil), Events: []Event{{watch.Added, pod("p", "node-a", 8)}}})
	c.Observe([]Observed{{watch.Deleted, pod("p", "node-a", 30)}})
	gones := c.Gones()
	if len(gones) != 1 || gones[0] != (Gone{Resource: "pods", Namespace: "ns", Name: "p", RV: 30}) {
		t.Fatalf("gones: %v", gones)
	}
	// A copy saved without p, and one saved before the deletion was
	// seen (p still in it): both restored without p.
	for _, held := range [][]Event{nil, {{watch.Added, pod("p", "node-a", 8)}}} {
		r := New("node-a")
		mustApply(t, r, Batch{Initial: true, Position: position(10, nil), Events: held})
		if err := r.RestoreGones(gones); err != nil {
			t.Fatal(err)
		}
		mustApply(t, r, Batch{Position: position(20, nil), Events: []Event{{watch.Modified, pod("p", "node-a", 18)}}})
		if got, _, _ := r.List(pods, Filter{}); len(got) != 0 {
			t.Errorf("a restored copy's pods: %q, want none", names(got))
		}
	}
	if err := New("node-a").RestoreGones([]Gone{{Resource: "leases", Name: "x", RV: 3}}); err == nil {
		t.Error("a deletion of a type outside the view was restored")
	}
}
