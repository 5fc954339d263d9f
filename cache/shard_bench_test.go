package cache_test

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"testing"

	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
	"github.com/nodeproxy/nodeproxy/internal/liveheap"
	"github.com/nodeproxy/nodeproxy/shard"
	"github.com/nodeproxy/nodeproxy/test/workload"
)

// BenchmarkBytesPerPodSharded is BytesPerPod's hub figure (a
// Deployment's pods written through their four stages, with the graph
// and the change log) for a sharded cache holding a third of the ranges
// beside an unsharded one, per pod of the cluster: what a replica of
// three costs for each pod the cluster has (issue 38's memory table).
// held-pods/pod is the share of the cluster's pods the sharded cache
// holds (a third, give or take how the nodes fall in the ranges).
// hub-B/pod-marginal is what as many pods more cost each, the change
// log being full (its size is per type, not per pod): what a pod of a
// larger cluster costs a replica.
//
//	go test ./cache -run '^$' -bench 'BytesPerPodSharded$' -benchtime 1x -count 3
func BenchmarkBytesPerPodSharded(b *testing.B) {
	const n, nodes = 9000, 300
	var third shard.Set
	for r := range shard.Ranges {
		if r%3 == 0 {
			third[r/64] |= 1 << (r % 64)
		}
	}
	// writes[s][i] is pod i's write at stage s, at resourceVersion
	// 2+s*2n+i, as BytesPerPod writes them: pods n to 2n are the
	// marginal ones, written after the first n.
	writes := make([][][]byte, len(workload.PodStages))
	held := 0
	for s, stage := range workload.PodStages {
		writes[s] = make([][]byte, 2*n)
		for i := range 2 * n {
			node := workload.NodeName(i % nodes)
			p := workload.DeploymentPod(fmt.Sprintf("ns%d", i/100), fmt.Sprintf("app%d", i/10), i, node, stage)
			p.ResourceVersion = strconv.Itoa(2 + s*2*n + i)
			raw, err := json.Marshal(p)
			if err != nil {
				b.Fatal(err)
			}
			writes[s][i] = raw
			if s == 0 && i < n && third.HasNode(node) {
				held++
			}
		}
	}
	for _, sharded := range []bool{false, true} {
		b.Run(fmt.Sprintf("held=%s", map[bool]string{false: "all", true: "third"}[sharded]), func(b *testing.B) {
			for b.Loop() {
				opts := cache.Options{LogSize: cache.DefaultLogSize, EncodedEntries: cache.DefaultEncodedEntries}
				if sharded {
					opts.Held = &third
				}
				c, err := cache.NewDetached(opts)
				if err != nil {
					b.Fatal(err)
				}
				store := c.Store(podsGVR)
				store.AddHandler(graph.New().PodHandler())
				if err := store.Replace(nil, "1"); err != nil {
					b.Fatal(err)
				}
				written := func(from, to int) { writeStages(b, store, writes, from, to) }
				base := liveheap.Bytes()
				written(0, n)
				first := liveheap.Bytes()
				b.ReportMetric(float64(int64(first)-int64(base))/n, "hub-B/pod")
				written(n, 2*n)
				b.ReportMetric(perObject(first, n), "hub-B/pod-marginal")
				runtime.KeepAlive(c)
			}
			if sharded {
				b.ReportMetric(float64(held)/n, "held-pods/pod")
			} else {
				b.ReportMetric(1, "held-pods/pod")
			}
		})
	}
}
