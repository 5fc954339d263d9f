package graph

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeproxy/nodeproxy/test/workload"
)

// These benchmarks use the shape of the in-tree Node authorizer's
// benchmarks (workload.ReferenceShape: 100k pods) so figures compare.
//
//	go test ./graph -run '^$' -bench . -benchmem

func referenceCluster(b *testing.B) *workload.Cluster {
	b.Helper()
	c, err := workload.Generate(workload.ReferenceShape())
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkPopulation builds the graph of 100k pods; retained-MB is the
// heap the graph keeps, beyond the pods themselves.
func BenchmarkPopulation(b *testing.B) {
	c := referenceCluster(b)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var g *Graph
	for b.Loop() {
		g = New()
		c.WriteTo(g)
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/1e6, "retained-MB")
	b.ReportMetric(float64(g.Len(Secret)+g.Len(ConfigMap)+g.Len(Pod)+g.Len(PersistentVolume)+g.Len(PersistentVolumeClaim)+g.Len(ServiceAccount)+g.Len(VolumeAttachment)), "objects")
	runtime.KeepAlive(c)
}

// BenchmarkWriteUnderReaders rewrites one pod (remove, re-add) while 5000
// goroutines ask reachability questions, and reports the latency
// distribution of the writes. The reference lets more than 10% of such
// writes wait over a second.
func BenchmarkWriteUnderReaders(b *testing.B) {
	c := referenceCluster(b)
	g := New()
	c.WriteTo(g)
	queries := []ObjectRef{
		{Kind: Secret, Namespace: "ns0", Name: "secret0-pod0-node0"},
		{Kind: Secret, Namespace: "ns0", Name: "secret0-shared"},
		{Kind: ConfigMap, Namespace: "ns0", Name: "configmap0-pod0-node1"},
		{Kind: PersistentVolume, Name: "pv0-pod0-node1-ns0"},
	}
	var stop atomic.Bool
	var reads atomic.Int64
	var wg sync.WaitGroup
	for i := range 5000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := int64(0)
			for !stop.Load() {
				g.Reachable("node0", queries[(i+int(n))%len(queries)])
				n++
			}
			reads.Add(n)
		}()
	}
	pod := c.Pods[0]
	latencies := make([]time.Duration, 0, 1<<16)
	for b.Loop() {
		start := time.Now()
		g.AddPod(pod)
		latencies = append(latencies, time.Since(start))
	}
	b.StopTimer()
	stop.Store(true)
	wg.Wait()
	slices.Sort(latencies)
	q := func(p float64) float64 { return float64(latencies[int(p*float64(len(latencies)-1))].Microseconds()) }
	b.ReportMetric(q(0.5), "p50-us")
	b.ReportMetric(q(0.99), "p99-us")
	b.ReportMetric(float64(latencies[len(latencies)-1].Microseconds()), "max-us")
	b.ReportMetric(float64(reads.Load())/float64(len(latencies)), "reads/write")
}

// BenchmarkReachable is the bare lookup, allowed and denied.
func BenchmarkReachable(b *testing.B) {
	c := referenceCluster(b)
	g := New()
	c.WriteTo(g)
	for _, tc := range []struct {
		name string
		ref  ObjectRef
		want bool
	}{
		{"allowed", ObjectRef{Kind: Secret, Namespace: "ns0", Name: "secret0-pod0-node0"}, true},
		{"allowed shared", ObjectRef{Kind: Secret, Namespace: "ns0", Name: "secret0-shared"}, true},
		{"denied", ObjectRef{Kind: Secret, Namespace: "ns0", Name: "secret0-pod0-node1"}, false},
		{"denied unknown", ObjectRef{Kind: Secret, Namespace: "ns1", Name: "no-such-secret"}, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if g.Reachable("node0", tc.ref) != tc.want {
					b.Fatal("wrong answer")
				}
			}
		})
	}
}
