package cache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/nodeproxy/nodeproxy/shard"
)

var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")

// nodesInDistinctRanges are n node names, each in a range of its own.
func nodesInDistinctRanges(n int) []string {
	var out []string
	seen := map[int]bool{}
	for i := 0; len(out) < n; i++ {
		name := "node-" + strconv.Itoa(i)
		if r := shard.Range(name); !seen[r] {
			seen[r] = true
			out = append(out, name)
		}
	}
	return out
}

func shardPod(name, node string, rv uint64) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name), ResourceVersion: strconv.FormatUint(rv, 10)},
		Spec:       corev1.PodSpec{NodeName: node},
	}
}

// shardedPods is a detached cache's pod store holding the ranges of
// held, with a handler that records what it is given.
func shardedPods(t *testing.T, held shard.Set) (*Cache, *Store, *[]string) {
	t.Helper()
	c, err := NewDetached(Options{LogSize: 8192, EncodedEntries: 16, Held: &held})
	if err != nil {
		t.Fatal(err)
	}
	s := c.Store(podsGVR)
	var seen []string
	s.AddHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { seen = append(seen, "add "+obj.(*corev1.Pod).Name) },
		UpdateFunc: func(_, obj interface{}) { seen = append(seen, "update "+obj.(*corev1.Pod).Name) },
		DeleteFunc: func(obj interface{}) { seen = append(seen, "delete "+obj.(*corev1.Pod).Name) },
	})
	return c, s, &seen
}

// logged is the changes after rv, as "TYPE name@rv".
func logged(t *testing.T, s *Store, rv uint64) string {
	t.Helper()
	events, err := s.Snapshot().Changes(rv)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range events {
		out = append(out, fmt.Sprintf("%s %s@%d", e.Type, e.Object.Name, e.RV))
	}
	return strings.Join(out, ", ")
}

func names(s *Snapshot) string {
	var out []string
	s.Ascend("", "", "", func(o *Object) bool {
		out = append(out, fmt.Sprintf("%s@%d", o.Name, o.RV))
		return true
	})
	return strings.Join(out, " ")
}

func check(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestOutOfShardPodsReachNeitherLogNorHandlers(t *testing.T) {
	n := nodesInDistinctRanges(2)
	in, out := n[0], n[1]
	_, s, seen := shardedPods(t, shard.NodesSet(in))
	must(t, s.Replace([]interface{}{shardPod("a", in, 2), shardPod("b", out, 3), shardPod("u", "", 4)}, "4"))
	must(t, s.Add(shardPod("c", out, 5)))
	must(t, s.Add(shardPod("d", in, 6)))
	must(t, s.Update(shardPod("b", out, 7)))
	must(t, s.Add(shardPod("v", "", 8)))
	must(t, s.Delete(shardPod("c", out, 9)))
	must(t, s.Update(shardPod("a", in, 10)))

	check(t, "held", names(s.Snapshot()), "a@10 d@6")
	check(t, "log", logged(t, s, 4), "ADDED d@6, MODIFIED a@10")
	check(t, "handlers", strings.Join(*seen, ", "), "add a, add d, update a")
	if got := s.HeldSince(out); got != math.MaxUint64 {
		t.Errorf("HeldSince(%s), not held, = %d, want MaxUint64", out, got)
	}
	if got := s.HeldSince(in); got != 0 {
		t.Errorf("HeldSince(%s), held since the first list, = %d, want 0", in, got)
	}
}

// TestBindingIntoTheShardIsAdded: an unbound pod is held by no replica;
// bound to a held node it appears as ADDED, as kube-apiserver's watch
// with a spec.nodeName field selector shows it.
func TestBindingIntoTheShardIsAdded(t *testing.T) {
	n := nodesInDistinctRanges(2)
	_, s, seen := shardedPods(t, shard.NodesSet(n[0]))
	must(t, s.Replace(nil, "1"))
	must(t, s.Add(shardPod("a", "", 2)))
	must(t, s.Add(shardPod("b", "", 3)))
	must(t, s.Update(shardPod("a", n[0], 4)))
	must(t, s.Update(shardPod("b", n[1], 5)))
	check(t, "log", logged(t, s, 1), "ADDED a@4")
	check(t, "handlers", strings.Join(*seen, ", "), "add a")
	check(t, "held", names(s.Snapshot()), "a@4")
}

func TestUnshardedCacheHoldsEveryPod(t *testing.T) {
	c, err := NewDetached(Options{LogSize: 16, EncodedEntries: 16})
	must(t, err)
	s := c.Store(podsGVR)
	must(t, s.Replace([]interface{}{shardPod("a", "n1", 2), shardPod("u", "", 3)}, "3"))
	must(t, s.Add(shardPod("b", "n2", 4)))
	check(t, "held", names(s.Snapshot()), "a@2 b@4 u@3")
	check(t, "log", logged(t, s, 3), "ADDED b@4")
	if got := s.HeldSince("n2"); got != 0 {
		t.Errorf("HeldSince = %d unsharded, want 0", got)
	}
}

// TestHoldDroppingRangesWritesNoEvents: the objects of dropped ranges
// leave the store silently (a DELETED to a kubelet would stop its pods);
// the handlers (the graph) forget them.
func TestHoldDroppingRangesWritesNoEvents(t *testing.T) {
	n := nodesInDistinctRanges(2)
	c, s, seen := shardedPods(t, shard.NodesSet(n...))
	must(t, s.Replace([]interface{}{shardPod("a", n[0], 2), shardPod("b", n[1], 3)}, "3"))
	*seen = nil
	must(t, c.Hold(context.Background(), shard.NodesSet(n[0])))
	check(t, "held", names(s.Snapshot()), "a@2")
	check(t, "log", logged(t, s, 3), "")
	check(t, "handlers", strings.Join(*seen, ", "), "delete b")
	if got := s.HeldSince(n[1]); got != math.MaxUint64 {
		t.Errorf("HeldSince(dropped) = %d, want MaxUint64", got)
	}
	var byNode []string
	s.Snapshot().AscendNode(n[1], "", "", "", func(o *Object) bool { byNode = append(byNode, o.Name); return true })
	if len(byNode) > 0 {
		t.Errorf("the node index still has %v", byNode)
	}
	// Its changes are out of the shard now.
	must(t, s.Update(shardPod("b", n[1], 4)))
	check(t, "log after", logged(t, s, 3), "")
}

// TestHoldAcquiringTakesTheListAndTheChangesMeanwhile drives an
// acquisition whose list is taken while the watch brings changes of the
// acquired node, both before the list's version and after it.
func TestHoldAcquiringTakesTheListAndTheChangesMeanwhile(t *testing.T) {
	n := nodesInDistinctRanges(2)
	held, acquired := n[0], n[1]
	c, s, seen := shardedPods(t, shard.NodesSet(held))
	must(t, s.Replace([]interface{}{shardPod("a", held, 2), shardPod("x", acquired, 3), shardPod("y", acquired, 4)}, "10"))
	c.list = func(_ context.Context, s *Store, keep func(*Object) bool) ([]*Object, uint64, error) {
		// The watch, meanwhile: y changes at 11 (the list shows it), z
		// is created at 13 and x deleted at 14 (after the list), the
		// held node's a changes at 12.
		must(t, s.Update(shardPod("y", acquired, 11)))
		must(t, s.Update(shardPod("a", held, 12)))
		must(t, s.Add(shardPod("z", acquired, 13)))
		must(t, s.Delete(shardPod("x", acquired, 14)))
		var out []*Object
		for _, p := range []*corev1.Pod{shardPod("a", held, 12), shardPod("x", acquired, 3), shardPod("y", acquired, 11)} {
			o, err := newObject(p)
			must(t, err)
			if keep(o) {
				out = append(out, o)
			}
		}
		return out, 12, nil
	}
	*seen = nil
	must(t, c.Hold(context.Background(), shard.NodesSet(held, acquired)))
	check(t, "held", names(s.Snapshot()), "a@12 y@11 z@13")
	check(t, "log", logged(t, s, 10), "MODIFIED a@12")
	check(t, "handlers", strings.Join(*seen, ", "), "update a, add y, add z")
	if got := s.HeldSince(acquired); got != 14 {
		t.Errorf("HeldSince(acquired) = %d, want 14: the store's version, past the list's", got)
	}
	if got := s.HeldSince(held); got != 0 {
		t.Errorf("HeldSince(held all along) = %d, want 0", got)
	}
	must(t, s.Update(shardPod("z", acquired, 15)))
	check(t, "log after", logged(t, s, 14), "MODIFIED z@15")
}

// TestHoldAcquiringFromAListAheadOfTheWatch: a consistent list may be
// newer than what the watch has brought; the watch's changes at or below
// it are in the list already and are dropped, newer ones are logged.
func TestHoldAcquiringFromAListAheadOfTheWatch(t *testing.T) {
	n := nodesInDistinctRanges(2)
	held, acquired := n[0], n[1]
	c, s, _ := shardedPods(t, shard.NodesSet(held))
	must(t, s.Replace(nil, "10"))
	c.list = func(_ context.Context, s *Store, keep func(*Object) bool) ([]*Object, uint64, error) {
		o, err := newObject(shardPod("x", acquired, 18))
		must(t, err)
		return []*Object{o}, 20, nil
	}
	must(t, c.Hold(context.Background(), shard.NodesSet(held, acquired)))
	if got := s.HeldSince(acquired); got != 20 {
		t.Errorf("HeldSince = %d, want 20: the list's version", got)
	}
	must(t, s.Add(shardPod("x", acquired, 18))) // late: the list had it
	must(t, s.Update(shardPod("x", acquired, 21)))
	check(t, "held", names(s.Snapshot()), "x@21")
	check(t, "log", logged(t, s, 10), "MODIFIED x@21")
}

// TestHoldAcquiringAcrossARelist: the type relists while a range is
// being acquired, at a version newer than the acquisition's list: the
// relist's state of the range wins, with the changes after it.
func TestHoldAcquiringAcrossARelist(t *testing.T) {
	n := nodesInDistinctRanges(2)
	held, acquired := n[0], n[1]
	c, s, _ := shardedPods(t, shard.NodesSet(held))
	must(t, s.Replace([]interface{}{shardPod("x", acquired, 3)}, "10"))
	c.list = func(_ context.Context, s *Store, keep func(*Object) bool) ([]*Object, uint64, error) {
		o, err := newObject(shardPod("x", acquired, 3))
		must(t, err)
		// x is deleted at 11, which the watch misses; it relists at 12
		// and z is added at 13.
		must(t, s.Replace([]interface{}{shardPod("y", acquired, 12)}, "12"))
		must(t, s.Add(shardPod("z", acquired, 13)))
		return []*Object{o}, 10, nil
	}
	must(t, c.Hold(context.Background(), shard.NodesSet(held, acquired)))
	check(t, "held", names(s.Snapshot()), "y@12 z@13")
	if got := s.HeldSince(acquired); got != 13 {
		t.Errorf("HeldSince = %d, want 13", got)
	}
}

// TestHoldFailingToListLeavesTheRangeUnheld: a failed list holds
// nothing of the range, and Hold says so.
func TestHoldFailingToListLeavesTheRangeUnheld(t *testing.T) {
	n := nodesInDistinctRanges(2)
	c, s, _ := shardedPods(t, shard.NodesSet(n[0]))
	must(t, s.Replace(nil, "10"))
	c.list = func(_ context.Context, s *Store, _ func(*Object) bool) ([]*Object, uint64, error) {
		must(t, s.Add(shardPod("x", n[1], 11)))
		return nil, 0, fmt.Errorf("kube-apiserver is away")
	}
	if err := c.Hold(context.Background(), shard.NodesSet(n...)); err == nil {
		t.Fatal("Hold succeeded with its list failing")
	}
	check(t, "held", names(s.Snapshot()), "")
	if got := s.HeldSince(n[1]); got != math.MaxUint64 {
		t.Errorf("HeldSince = %d, want MaxUint64", got)
	}
	must(t, s.Add(shardPod("y", n[1], 12)))
	check(t, "held after", names(s.Snapshot()), "")
	if held, _ := s.Held(); held != shard.NodesSet(n[0]) {
		t.Error("the store holds other ranges than before the failed acquisition")
	}
}

// TestListTransformerDropsTheBytesOfPodsNotHeld: a watch-list's pods of
// nodes not held are never encoded; should their range be acquired
// before the list ends, the list is refused and the reflector lists
// again, rather than take in pods without their bytes.
func TestListTransformerDropsTheBytesOfPodsNotHeld(t *testing.T) {
	n := nodesInDistinctRanges(2)
	c, s, seen := shardedPods(t, shard.NodesSet(n[0]))
	transform := s.Transformer()
	take := func(p *corev1.Pod) interface{} {
		obj, err := transform(p)
		must(t, err)
		return obj
	}
	in, out := take(shardPod("a", n[0], 2)), take(shardPod("b", n[1], 3))
	if in.(*listed).o.raw.empty() {
		t.Error("a pod of a held node was taken in without its bytes")
	}
	if !out.(*listed).o.dropped() {
		t.Error("a pod of a node not held was taken in with its bytes or its object")
	}
	must(t, s.Replace([]interface{}{in, out}, "3"))
	check(t, "held", names(s.Snapshot()), "a@2")
	check(t, "handlers", strings.Join(*seen, ", "), "add a")

	in, out = take(shardPod("a", n[0], 2)), take(shardPod("b", n[1], 3))
	c.list = func(context.Context, *Store, func(*Object) bool) ([]*Object, uint64, error) { return nil, 3, nil }
	must(t, c.Hold(context.Background(), shard.NodesSet(n...)))
	if err := s.Replace([]interface{}{in, out}, "4"); !errors.Is(err, errHeldChangedDuringList) {
		t.Errorf("a list whose pods of a range acquired meanwhile lack their bytes: %v, want errHeldChangedDuringList", err)
	}
	check(t, "held after the refused list", names(s.Snapshot()), "a@2")
}

// TestEachPerNodeTypeKeepsItsHeldNodesObjects: which field names an
// object's node, type by type, and what every replica keeps.
func TestEachPerNodeTypeKeepsItsHeldNodesObjects(t *testing.T) {
	n := nodesInDistinctRanges(2)
	in, out := n[0], n[1]
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "2"}
	}
	attachment := func(name, node string) runtime.Object {
		return &storagev1.VolumeAttachment{ObjectMeta: meta(name), Spec: storagev1.VolumeAttachmentSpec{NodeName: node}}
	}
	slice := func(name string, node *string) runtime.Object {
		return &resourcev1.ResourceSlice{ObjectMeta: meta(name), Spec: resourcev1.ResourceSliceSpec{NodeName: node}}
	}
	for _, tc := range []struct {
		resource string
		objects  []runtime.Object
		kept     string
	}{
		{"nodes", []runtime.Object{&corev1.Node{ObjectMeta: meta(in)}, &corev1.Node{ObjectMeta: meta(out)}}, in + "@2"},
		{"csinodes", []runtime.Object{&storagev1.CSINode{ObjectMeta: meta(in)}, &storagev1.CSINode{ObjectMeta: meta(out)}}, in + "@2"},
		{"volumeattachments", []runtime.Object{attachment("a", in), attachment("b", out)}, "a@2"},
		{"resourceslices", []runtime.Object{slice("a", &in), slice("b", &out), slice("pool", nil)}, "a@2 pool@2"},
		{"secrets", []runtime.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: out, ResourceVersion: "2"}}}, out + "@2"},
	} {
		t.Run(tc.resource, func(t *testing.T) {
			held := shard.NodesSet(in)
			c, err := NewDetached(Options{LogSize: 16, EncodedEntries: 16, Held: &held})
			must(t, err)
			var s *Store
			for _, gvr := range Watched() {
				if gvr.Resource == tc.resource {
					s = c.Store(gvr)
				}
			}
			must(t, s.Replace(nil, "1"))
			for _, obj := range tc.objects {
				must(t, s.Add(obj))
			}
			check(t, "held", names(s.Snapshot()), tc.kept)
		})
	}
}
