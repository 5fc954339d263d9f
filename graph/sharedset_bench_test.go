package graph

import (
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// These benchmarks measure what an object that several nodes reach costs
// in a large cluster, which the reference shape (500 nodes) hides: node
// ids run to 100,000 here.
//
//	go test ./graph -run '^$' -bench SharedObjectHeap -benchtime 1x
//	go test ./graph -run '^$' -bench 'SharedObject(Write|Reachable)|DaemonSet'

const clusterNodeIDs = 100_000

// BenchmarkSharedObjectHeap reports the heap that the reachability of one
// object reached by k nodes costs (bytes-per-object), at 100,000 node ids,
// the k nodes spread evenly over them and the highest id among them. It
// drives the writer's primitives directly so that what is measured is the
// set alone: not the entry, which every object has, nor pod records.
func BenchmarkSharedObjectHeap(b *testing.B) {
	for _, k := range []int{2, 10, 1_000, 100_000} {
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) {
			// Enough objects for the figure to be well above the heap's
			// noise, few enough that k=100,000 builds in seconds.
			objects := min(10_000, max(16, 2_000_000/k))
			g := New()
			for i := range clusterNodeIDs {
				g.nodeIDLocked(fmt.Sprintf("node%d", i))
			}
			ids := make([]uint32, k)
			for i := range ids {
				ids[i] = uint32(clusterNodeIDs - 1 - i*(clusterNodeIDs/k))
			}
			es := make([]*entry, objects)
			for i := range es {
				es[i] = g.acquireLocked(ObjectRef{Kind: Secret, Namespace: "ns", Name: fmt.Sprintf("s%d", i)})
			}
			var perObject float64
			for b.Loop() {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for _, e := range es {
					for _, id := range ids {
						g.setPathsLocked(e, id, 1)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perObject = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(objects)
				b.StopTimer()
				for _, e := range es {
					for _, id := range ids {
						g.setPathsLocked(e, id, 0)
					}
				}
				b.StartTimer()
			}
			b.ReportMetric(perObject, "bytes-per-object")
			runtime.KeepAlive(g)
		})
	}
}

// BenchmarkSharedObjectWrite is the writer's cost of one node leaving and
// rejoining an object that k nodes reach, at 100,000 node ids: what a pod
// replaced on one of those nodes costs the object's set. ns/op is per
// change (leave or join).
func BenchmarkSharedObjectWrite(b *testing.B) {
	for _, k := range []int{10, 1_000, 3_000, 100_000} {
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) {
			g := New()
			for i := range clusterNodeIDs {
				g.nodeIDLocked(fmt.Sprintf("node%d", i))
			}
			e := g.acquireLocked(ObjectRef{Kind: Secret, Namespace: "ns", Name: "shared"})
			ids := make([]uint32, k)
			for i := range ids {
				ids[i] = uint32(clusterNodeIDs - 1 - i*(clusterNodeIDs/k))
				g.setPathsLocked(e, ids[i], 1)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				id := ids[(i*7919)%k]
				g.setPathsLocked(e, id, 0)
				g.setPathsLocked(e, id, 1)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/change")
		})
	}
}

// BenchmarkSharedObjectReachable is a decision on an object that k nodes
// reach, at 100,000 node ids, for a member ("allowed") and for a node
// between two members ("denied").
func BenchmarkSharedObjectReachable(b *testing.B) {
	for _, k := range []int{10, 1_000, 3_000, 100_000} {
		g := New()
		for i := range clusterNodeIDs {
			g.nodeIDLocked(fmt.Sprintf("node%d", i))
		}
		ref := ObjectRef{Kind: Secret, Namespace: "ns", Name: "shared"}
		e := g.acquireLocked(ref)
		step := clusterNodeIDs / k
		for i := range k {
			g.setPathsLocked(e, uint32(clusterNodeIDs-1-i*step), 1)
		}
		mid := clusterNodeIDs - 1 - (k/2)*step
		member, between := fmt.Sprintf("node%d", mid), fmt.Sprintf("node%d", mid-1)
		if step == 1 {
			between = "node-unknown" // every node id is a member
		}
		for _, tc := range []struct {
			name, node string
			want       bool
		}{{"allowed", member, true}, {"denied", between, false}} {
			b.Run(fmt.Sprintf("k=%d/%s", k, tc.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if g.Reachable(tc.node, ref) != tc.want {
						b.Fatal("wrong answer")
					}
				}
			})
		}
	}
}

// BenchmarkDaemonSetPodWrite is the write cost of a pod that uses an
// object every node reaches, such as a kube-system secret a DaemonSet
// mounts, at 100,000 nodes: "replaced" deletes and re-adds the pod on
// one node (a rollout), so the node leaves the object's set and joins
// it again; "new node" adds the pod on a node never seen before. ns/op
// is per pod write.
func BenchmarkDaemonSetPodWrite(b *testing.B) {
	pod := func(node int) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: fmt.Sprintf("agent-%d", node)},
			Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node%d", node), Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "agent-config"}}},
			}},
		}
	}
	g := New()
	pods := make([]*corev1.Pod, clusterNodeIDs)
	for i := range pods {
		pods[i] = pod(i)
		g.AddPod(pods[i])
	}
	b.Run("replaced", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			p := pods[(i*7919)%len(pods)] // spread over the ids
			g.DeletePod(p.Namespace, p.Name)
			g.AddPod(p)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/write")
	})
	b.Run("new node", func(b *testing.B) {
		b.ReportAllocs()
		next := len(pods)
		var fresh []*corev1.Pod
		for b.Loop() {
			p := pod(next)
			next++
			g.AddPod(p)
			fresh = append(fresh, p)
		}
		b.StopTimer()
		for _, p := range fresh {
			g.DeletePod(p.Namespace, p.Name)
		}
	})
}
