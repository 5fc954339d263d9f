package nodeview

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/shard"
)

func key(obj runtime.Object) string {
	m := obj.(metav1.Object)
	return m.GetNamespace() + "/" + m.GetName()
}

func labelled(p *corev1.Pod) *corev1.Pod {
	p.Labels = map[string]string{"changed": "yes"}
	return p
}

// TestResumeFromBeforeTheReplicaHeldTheNodeIsAnsweredAfresh: a sharded
// replica that acquires n2's range after the position n2's consumer
// holds cannot rebuild n2's view there (its objects came in without
// events), and sends the view afresh; n1's consumer, whose node it held
// all along, resumes from its position.
func TestResumeFromBeforeTheReplicaHeldTheNodeIsAnsweredAfresh(t *testing.T) {
	if shard.Range("n1") == shard.Range("n2") {
		t.Fatal("n1 and n2 share a range; the test needs them apart")
	}
	var k cluster
	truth := map[schema.GroupVersionResource]map[string]runtime.Object{}
	list := func(_ context.Context, gvr schema.GroupVersionResource) ([]runtime.Object, string, error) {
		var out []runtime.Object
		for _, obj := range truth[gvr] {
			out = append(out, obj.DeepCopyObject())
		}
		return out, fmt.Sprint(k.rv + 1), nil
	}
	held := shard.NodesSet("n1")
	a := newReplica(t, 64) // unsharded: n2's consumer starts here
	b := newReplicaOf(t, cache.Options{LogSize: 64, EncodedEntries: 1024, Held: &held, List: list}, nil)
	write := func(w write) {
		if truth[w.gvr] == nil {
			truth[w.gvr] = map[string]runtime.Object{}
		}
		truth[w.gvr][key(w.obj)] = w.obj
		a.write(w)
		b.write(w)
		// As b's reflector does after every event, those its store
		// turned away included.
		b.cache.Store(w.gvr).UpdateResourceVersion(w.obj.(metav1.Object).GetResourceVersion())
	}
	write(k.put(podsGVR, pod("p1", "n1")))
	write(k.put(podsGVR, pod("p2", "n2")))
	write(k.put(nodesGVR, node("n2", "x")))

	c1 := b.open("n1", nil)
	c2 := a.open("n2", nil)
	a.views.Step()
	b.views.Step()
	expect(t, "n1 on the replica holding it", c1.read(), "ADDED Pod ns/p1", "BOOKMARK initial-events-end")
	expect(t, "n2 on the unsharded replica", c2.read(), "ADDED Node n2", "ADDED Pod ns/p2", "BOOKMARK initial-events-end")
	if _, ok := b.cache.Store(podsGVR).Snapshot().Get("ns", "p2"); ok {
		t.Fatal("the sharded replica holds a pod of a node it does not hold")
	}

	// Both pods change; then b acquires n2's range.
	write(k.put(podsGVR, labelled(pod("p1", "n1"))))
	write(k.put(podsGVR, labelled(pod("p2", "n2"))))
	if err := b.cache.Hold(context.Background(), shard.NodesSet("n1", "n2")); err != nil {
		t.Fatal(err)
	}
	since := b.cache.Store(podsGVR).HeldSince("n2")
	if at := c2.position().At[podIndex]; since <= at {
		t.Fatalf("HeldSince(n2) = %d, not after the consumer's position %d", since, at)
	}

	if _, ok := b.cache.Store(nodesGVR).Snapshot().Get("", "n2"); !ok {
		t.Fatal("b acquired n2's range without its Node")
	}
	c1.sink.Close(nil) // n1's connection to b is lost: it resumes
	c2.resumeOn(b)
	c1.resumeOn(b)
	b.views.Step()
	expect(t, "n2 resumed from before b held it: afresh", c2.read(), "ADDED Node n2", "ADDED Pod ns/p2", "BOOKMARK initial-events-end")
	expect(t, "n1 resumed", c1.read(), "MODIFIED Pod ns/p1", "BOOKMARK")
	check(t, b, c2, "n2 after the view afresh")
	check(t, b, c1, "n1 after its resume")
}
