package graph

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// startReaders starts 8 goroutines that ask check until the returned
// stop is called, which waits for them and says how many of their checks
// failed out of how many.
func startReaders(check func() bool) (stop func() (bad, reads int64)) {
	var done atomic.Bool
	var failed, total atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for !done.Load() {
				if !check() {
					failed.Add(1)
				}
				total.Add(1)
			}
		})
	}
	return func() (int64, int64) {
		done.Store(true)
		wg.Wait()
		return failed.Load(), total.Load()
	}
}

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

	stop := startReaders(func() bool { return g.Reachable("n0", kept) && !g.Reachable("n0", foreign) })
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
	if bad, reads := stop(); bad > 0 {
		t.Fatalf("%d wrong answers of %d during churn", bad, reads)
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

	stop := startReaders(func() bool { return g.Reachable("n150", kept) && !g.Reachable("never", kept) })
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
	if bad, reads := stop(); bad > 0 {
		t.Fatalf("%d wrong answers of %d while the set changed form", bad, reads)
	}
	for _, f := range []string{"one node", "sorted", "bitmap"} {
		if forms[f] == 0 {
			t.Fatalf("the set was never in the %s form: %v", f, forms)
		}
	}
}
