package nodeview

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/testutil"

	"github.com/nodeproxy/nodeproxy/graph"
)

func secretRef(ns, name string) graph.ObjectRef {
	return graph.ObjectRef{Kind: graph.Secret, Namespace: ns, Name: name}
}

// viewsOf is what x.views yields for ref, as the views' nodes in order.
func viewsOf(x *reachIndex, ref graph.ObjectRef) []string {
	var out []string
	for v := range x.views(ref) {
		out = append(out, v.node)
	}
	slices.Sort(out)
	return out
}

func TestReachIndexHoldsOneViewInlineAndSeveralInAMap(t *testing.T) {
	x := newReachIndex()
	v1, v2 := &view{node: "n1"}, &view{node: "n2"}
	s := secretRef("ns", "s")
	same := graph.ObjectRef{Kind: graph.ConfigMap, Namespace: "ns", Name: "s"} // another kind, the same names

	x.setReach(v1, s, reach{paths: 1, held: true})
	x.setReach(v1, same, reach{paths: 2})
	if got := viewsOf(x, s); !slices.Equal(got, []string{"n1"}) || x.isShared(s) || len(x.shared) != 0 {
		t.Errorf("one view: views %v, shared %t, %d maps, want [n1], false, 0", got, x.isShared(s), len(x.shared))
	}
	if got := x.reach(v1, same); got != (reach{paths: 2}) {
		t.Errorf("the configmap of the same name: %+v, want its own reach", got)
	}

	x.setReach(v2, s, reach{paths: 3})
	if got := viewsOf(x, s); !slices.Equal(got, []string{"n1", "n2"}) || !x.isShared(s) {
		t.Errorf("two views: views %v, shared %t, want [n1 n2], true", got, x.isShared(s))
	}
	if r1, r2 := x.reach(v1, s), x.reach(v2, s); r1 != (reach{paths: 1, held: true}) || r2 != (reach{paths: 3}) {
		t.Errorf("two views: reaches %+v and %+v, each its own", r1, r2)
	}

	x.setReach(v1, s, reach{})
	if got := viewsOf(x, s); !slices.Equal(got, []string{"n2"}) || x.isShared(s) || len(x.shared) != 0 {
		t.Errorf("back to one view: views %v, shared %t, %d maps, want [n2], false, 0 (inline again)", got, x.isShared(s), len(x.shared))
	}
	if got := x.reach(v2, s); got != (reach{paths: 3}) {
		t.Errorf("back to one view: %+v, want the reach it had", got)
	}

	x.setReach(v2, s, reach{})
	x.setReach(v1, same, reach{})
	if x.len() != 0 || len(x.spaces) != 0 {
		t.Errorf("every entry gone: %d entries and %d spaces left", x.len(), len(x.spaces))
	}
}

func TestReachIndexForgetsClosedViewsAndTheSpacesOnlyTheyHad(t *testing.T) {
	x := newReachIndex()
	open, closed := &view{node: "open", joined: true}, &view{node: "closed", joined: true}
	both := secretRef("shared", "ca")
	x.setReach(open, both, reach{paths: 1})
	x.setReach(closed, both, reach{paths: 1})
	x.setReach(open, secretRef("a", "s"), reach{paths: 1, held: true})
	for i := range 10 {
		x.setReach(closed, secretRef("b", fmt.Sprint("s", i)), reach{paths: 1, held: true})
	}
	if len(x.spaces) != 3 {
		t.Fatalf("%d spaces, want 3 (secrets of shared, a, b)", len(x.spaces))
	}

	closed.joined = false
	x.dropViews(func(v *view) bool { return !v.joined })
	if x.len() != 2 || len(x.shared) != 0 {
		t.Errorf("after the drop: %d entries, %d shared maps, want 2 and 0", x.len(), len(x.shared))
	}
	if got := viewsOf(x, both); !slices.Equal(got, []string{"open"}) || x.reach(open, both) != (reach{paths: 1}) {
		t.Errorf("the object both reached: views %v, reach %+v, want [open] with its reach", got, x.reach(open, both))
	}
	if _, ok := x.spaces[space{graph.Secret, "b"}]; ok || len(x.spaces) != 2 || len(x.free) != 1 {
		t.Errorf("spaces after the drop: %v, free %v: want b's gone and its id free", slices.Collect(maps.Keys(x.spaces)), x.free)
	}
	if closed.id != 0 || len(x.freeIDs) != 1 {
		t.Errorf("the closed view keeps id %d, %d ids free: want its id freed", closed.id, len(x.freeIDs))
	}
	next := &view{node: "next", joined: true}
	x.setReach(next, secretRef("a", "t"), reach{paths: 2})
	if len(x.freeIDs) != 0 {
		t.Errorf("a new view's first entry left %d ids free, want the freed one taken", len(x.freeIDs))
	}
	if x.reach(next, secretRef("a", "s")) != (reach{}) || x.reach(open, secretRef("a", "t")) != (reach{}) || x.reach(next, both) != (reach{}) {
		t.Error("the view given the freed id reads another view's entries, or the other its own")
	}
	x.setReach(open, secretRef("c", "s"), reach{paths: 1})
	if len(x.free) != 0 || len(x.byID) != 3 {
		t.Errorf("a new space took %d ids in all and left %v free, want b's id reused", len(x.byID), x.free)
	}
	if x.reach(open, secretRef("b", "s0")) != (reach{}) {
		t.Error("a name of the space gone reads as reached in the space that took its id")
	}
}

func TestReachIndexGivesBackItsMapOnceMostEntriesWent(t *testing.T) {
	RegisterMetrics() // component-base counts nothing on a metric not registered
	x := newReachIndex()
	v := &view{node: "n1", joined: true}
	for i := range 2000 {
		x.setReach(v, secretRef("ns", fmt.Sprint(i)), reach{paths: int32(i + 1)})
	}
	before, err := testutil.GetCounterMetricValue(indexRebuilds)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1400 {
		x.setReach(v, secretRef("ns", fmt.Sprint(i)), reach{})
	}
	x.compact()
	if x.peak != 2000 {
		t.Errorf("600 of 2000 entries left: peak %d, want 2000 (not copied yet)", x.peak)
	}
	for i := 1400; i < 1600; i++ {
		x.setReach(v, secretRef("ns", fmt.Sprint(i)), reach{})
	}
	x.compact()
	after, err := testutil.GetCounterMetricValue(indexRebuilds)
	if err != nil {
		t.Fatal(err)
	}
	if x.peak != 400 || after-before != 1 {
		t.Errorf("400 of 2000 entries left: peak %d, %v rebuilds, want 400 and 1", x.peak, after-before)
	}
	for i := 1600; i < 2000; i++ {
		if r := x.reach(v, secretRef("ns", fmt.Sprint(i))); r.paths != int32(i+1) {
			t.Fatalf("entry %d after the copy: %+v", i, r)
		}
	}
}

// TestAClosedViewLeavesNoEntryAndTheOthersKeepTheirs: the views closed
// in a step are taken out of the index that routes changes to views by
// one scan, which must leave every entry of the views still open.
func TestAClosedViewLeavesNoEntryAndTheOthersKeepTheirs(t *testing.T) {
	r := newReplica(t, 256)
	var k cluster
	for _, name := range []string{"both", "own1", "own2"} {
		r.write(k.put(secretsGVR, secret(name, "v1")))
	}
	r.write(k.put(podsGVR, pod("p1", "n1", "secret/both", "secret/own1")))
	r.write(k.put(podsGVR, pod("p2", "n2", "secret/both", "secret/own2")))
	c1, c2 := r.open("n1", nil), r.open("n2", nil)
	r.views.Step()
	c1.read()
	c2.read()
	if n := r.views.reached.len(); n != 4 { // both, own1, own2, namespace ns
		t.Fatalf("%d objects in the index with both views open, want 4", n)
	}

	c1.sink.Close(&metav1.Status{})
	r.views.Step()
	if n := r.views.reached.len(); n != 3 || r.views.shared(secretRef("ns", "both")) {
		t.Errorf("after n1's view closed: %d objects, the shared one shared: %t; want 3, false", n, r.views.shared(secretRef("ns", "both")))
	}
	expect(t, "n2's view, for a change of what both reached and of what only the closed one did",
		step(r, c2, k.put(secretsGVR, secret("both", "v2")), k.put(secretsGVR, secret("own1", "v2")), k.put(secretsGVR, secret("own2", "v2"))),
		"MODIFIED Secret ns/both", "MODIFIED Secret ns/own2", "BOOKMARK")
}
