package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	nodeauthorizer "github.com/nodeproxy/nodeproxy/authorizer"
	"github.com/nodeproxy/nodeproxy/graph"
	"github.com/nodeproxy/nodeproxy/test/workload"
)

var graphScenario = Scenario{
	Name: "graph",
	Help: "authorization graph: build time and retained memory; pod write latency while every CPU asks questions",
	Run:  runGraph,
}

func runGraph(ctx context.Context, env *Env) (*Result, error) {
	r := &Result{Scenario: "graph"}
	c := env.Cluster
	env.progressf("graph: building from %d pods, %d volumes, %d attachments", len(c.Pods), len(c.PVs), len(c.Attachments))
	before := heapInUse()
	start := time.Now()
	g := graph.New()
	c.WriteTo(g)
	took := time.Since(start)
	retained := heapInUse() - before
	r.Figures = append(r.Figures,
		Figure{Name: "build", Value: took.Seconds(), Unit: "s"},
		Figure{Name: "retained heap", Value: float64(retained) / (1 << 20), Unit: "MiB"},
		Figure{Name: "retained heap per pod", Value: float64(retained) / float64(max(len(c.Pods), 1)), Unit: "B"},
	)
	runtime.KeepAlive(g)

	// Writes while readers ask: each write adds one new pod to a node
	// and deletes it again, as pods come and go; readers ask the
	// authorizer about that node's objects on every CPU.
	a := nodeauthorizer.New(g)
	qs := questions(env.Shape, c, 1000)
	readers := runtime.GOMAXPROCS(0)
	env.progressf("graph: pod writes for %s under %d reading goroutines", env.PhaseDuration, readers)
	readCtx, stopReading := context.WithCancel(ctx)
	var wg sync.WaitGroup
	reads := make([]int64, readers)
	for w := range readers {
		wg.Go(func() {
			for i := w; readCtx.Err() == nil; i += readers {
				if len(qs) > 0 {
					q := &qs[i%len(qs)]
					a.Authorize(readCtx, &q.attrs)
				} else {
					g.Reachable(c.Nodes[i%len(c.Nodes)].Name, graph.ObjectRef{})
				}
				reads[w]++
			}
		})
	}
	var writes []time.Duration
	deadline := time.Now().Add(env.PhaseDuration)
	node := workload.NodeName(0)
	for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		pod, _ := env.Shape.Pod(env.Shape.PodsPerNode+i, node)
		start := time.Now()
		g.AddPod(pod)
		g.DeletePod(pod.Namespace, pod.Name)
		writes = append(writes, time.Since(start)/2)
	}
	stopReading()
	wg.Wait()
	var total int64
	for _, n := range reads {
		total += n
	}
	r.Latencies = append(r.Latencies, latencyOf(fmt.Sprintf("pod write under %d readers", readers), writes))
	r.Figures = append(r.Figures, Figure{Name: "reads during the writes", Value: float64(total) / env.PhaseDuration.Seconds(), Unit: "/s"})
	if err := ctx.Err(); err != nil {
		return interrupted(ctx, r, err)
	}
	return r, nil
}

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
