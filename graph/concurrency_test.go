package graph

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestReadersDuringChurn checks, under -race, what readers may rely on
// while writers churn: an object a stable pod uses stays reachable, and an
// object no pod on a node has ever used is never reachable from it.
func TestReadersDuringChurn(t *testing.T) {
	g := New()
	pod := func(name, node string, secrets ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.PodSpec{NodeName: node}}
		for _, s := range secrets {
			p.Spec.Volumes = append(p.Spec.Volumes, secretVolume(s))
		}
		return p
	}
	g.AddPod(pod("stable", "n0", "kept"))
	kept := ObjectRef{Kind: Secret, Namespace: "ns", Name: "kept"}
	foreign := ObjectRef{Kind: Secret, Namespace: "ns", Name: "only-n1"}

	var stop atomic.Bool
	var bad atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if !g.Reachable("n0", kept) {
					bad.Add(1)
				}
				if g.Reachable("n0", foreign) {
					bad.Add(1)
				}
			}
		}()
	}
	// Churn: pods on many nodes share "kept", making it flip between the
	// one-node and many-node forms; n1 alone ever uses "only-n1".
	for i := range 2000 {
		node := fmt.Sprintf("n%d", i%7)
		name := fmt.Sprintf("p%d", i%50)
		secrets := []string{"kept"}
		if node == "n1" {
			secrets = append(secrets, "only-n1")
		}
		g.AddPod(pod(name, node, secrets...))
		if i%3 == 0 {
			g.DeletePod("ns", fmt.Sprintf("p%d", (i*7)%50))
		}
	}
	stop.Store(true)
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d wrong answers during churn", n)
	}
}

// TestReadersWhileSharedSetsChangeForm checks, under -race, that readers
// stay right while the writer moves a shared object's set through every
// form: one node, a sorted set of a few far-apart nodes, a bitmap as
// nodes fill in, a grown bitmap as new nodes join, and back. A node that
// keeps a pod on the object always reaches it; a node that never has one
// never does.
func TestReadersWhileSharedSetsChangeForm(t *testing.T) {
	g := New()
	pod := func(name, node, secret string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec:       corev1.PodSpec{NodeName: node, Volumes: []corev1.Volume{secretVolume(secret)}},
		}
	}
	g.AddPod(pod("stable", "n150", "kept"))
	g.AddPod(pod("elsewhere", "never", "other")) // a known node id that never uses "kept"
	kept := ObjectRef{Kind: Secret, Namespace: "ns", Name: "kept"}

	var stop atomic.Bool
	var bad, reads atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if !g.Reachable("n150", kept) {
					bad.Add(1)
				}
				if g.Reachable("never", kept) {
					bad.Add(1)
				}
				reads.Add(2)
			}
		}()
	}
	forms := map[string]int{}
	form := func() {
		e := g.objects.get(kept)
		switch r := e.reach.Load(); {
		case r != manyNodes:
			forms["one node"]++
		case g.multi.get(e).set.Load().bits != nil:
			forms["bitmap"]++
		default:
			forms["sorted"]++
		}
	}
	for round := range 6 {
		// Far apart first (sorted), then filling in (bitmap), then new
		// node names beyond every id so far (a growing bitmap).
		var names []string
		for i := 0; i < 300; i += 97 {
			names = append(names, fmt.Sprintf("n%d", i))
		}
		for i := range 300 {
			names = append(names, fmt.Sprintf("n%d", i))
		}
		for i := range 64 {
			names = append(names, fmt.Sprintf("r%d-n%d", round, i))
		}
		for i, node := range names {
			g.AddPod(pod(fmt.Sprintf("p%d", i), node, "kept"))
			form()
		}
		for i := range names {
			g.DeletePod("ns", fmt.Sprintf("p%d", i))
			form()
		}
	}
	stop.Store(true)
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d wrong answers of %d while the set changed form", n, reads.Load())
	}
	for _, f := range []string{"one node", "sorted", "bitmap"} {
		if forms[f] == 0 {
			t.Fatalf("the set was never in the %s form: %v", f, forms)
		}
	}
}
