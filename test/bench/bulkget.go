package bench

import (
	"context"
	"fmt"
	"math"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/workload"
)

var bulkgetScenario = Scenario{
	Name:       "bulkget",
	Help:       "a node fetching everything its pods use: one bulk get against a request per object (in-process to nodeproxy; with --kubeconfig, GETs on kube-apiserver)",
	Run:        runBulkGetInProcess,
	RunAgainst: runBulkGetAgainst,
}

// bulkgetNodes caps the nodes a bulkget round visits: enough for the
// percentiles, few enough that a round of single requests (about 60 per
// node in the reference shape) fits a phase.
const bulkgetNodes = 100

// fetchWay is one way of fetching each node's objects.
type fetchWay struct {
	name string
	// fetch fetches node n's objects and returns how many it got.
	fetch func(ctx context.Context, n int) (int, error)
}

// fetchAll runs each way over nodes for a phase (at least one round each,
// nodes in turn, one request at a time, so that latency is the server's
// and not a queue's), checks every way got want[n] objects for node n,
// and adds a latency per way and the ratio of the first way's median to
// the last's.
func fetchAll(ctx context.Context, env *Env, r *Result, want []int, ways []fetchWay) error {
	for _, w := range ways {
		var took []time.Duration
		started := time.Now()
		bar := env.phase(len(want), "bulkget: %s", w.name)
		for round := 0; round == 0 || time.Since(started) < env.PhaseDuration; round++ {
			for n := range want {
				if err := ctx.Err(); err != nil {
					bar.Done()
					return err
				}
				start := time.Now()
				got, err := w.fetch(ctx, n)
				took = append(took, time.Since(start))
				if err != nil {
					bar.Done()
					return fmt.Errorf("bulkget: %s, node %d: %w", w.name, n, err)
				}
				if got != want[n] {
					bar.Done()
					return fmt.Errorf("bulkget: %s, node %d: got %d objects, want %d", w.name, n, got, want[n])
				}
				if round == 0 {
					bar.Add(1)
				}
			}
		}
		bar.Done()
		r.Latencies = append(r.Latencies, latencyOf(w.name, took))
	}
	first, last := r.Latencies[len(r.Latencies)-len(ways)], r.Latencies[len(r.Latencies)-1]
	r.Figures = append(r.Figures, Figure{Name: "median time, a request per object / one bulk get", Value: first.P50 / last.P50, Unit: "x"})
	return nil
}

// runBulkGetInProcess fetches, for each of the first nodes, its pods and
// every secret and configmap they use from nodeproxy in this process over
// HTTPS: one request per object (and one for the pods), as a kubelet
// without bulk get would ask, against one bulk get holding them all.
// Every request is decoded, authorized against the graph and answered
// from the cache either way; the difference is the per-request cost.
func runBulkGetInProcess(ctx context.Context, env *Env) (*Result, error) {
	r := &Result{Scenario: "bulkget"}
	nodes := min(env.Watch.Nodes, env.Shape.Nodes, bulkgetNodes)
	p, err := startInProcess(ctx, env.Cluster, env.Watch.ObjectSize)
	if err != nil {
		return nil, err
	}
	defer p.stop()

	ops := make([][]v1alpha1.GetOperation, nodes)
	clients := make([]*bulkClient, nodes)
	want := make([]int, nodes)
	objects := 0
	for n := range nodes {
		ops[n] = []v1alpha1.GetOperation{{Resource: metav1GVR("pods"),
			Options: metav1.ListOptions{FieldSelector: "spec.nodeName=" + workload.NodeName(n)}}}
		for _, s := range subscriptions(env.Shape, env.Cluster, n, math.MaxInt) {
			ops[n] = append(ops[n], namedOp(s.resource, s.namespace, s.name))
		}
		if clients[n], err = newBulkClient(p.nodeConfig(n)); err != nil {
			return nil, err
		}
		want[n] = len(ops[n]) - 1 + env.Shape.PodsPerNode
		objects += want[n]
	}
	r.Figures = append(r.Figures,
		Figure{Name: "nodes", Value: float64(nodes)},
		Figure{Name: "objects per node", Value: float64(objects) / float64(nodes)},
	)
	err = fetchAll(ctx, env, r, want, []fetchWay{
		{name: "a request per object", fetch: func(ctx context.Context, n int) (int, error) {
			got := 0
			for _, op := range ops[n] {
				counts, err := clients[n].get(ctx, []v1alpha1.GetOperation{op})
				if err != nil {
					return got, err
				}
				got += total(counts)
			}
			return got, nil
		}},
		{name: "one bulk get", fetch: func(ctx context.Context, n int) (int, error) {
			counts, err := clients[n].get(ctx, ops[n])
			return total(counts), err
		}},
	})
	if err != nil {
		return interrupted(ctx, r, err)
	}
	return r, nil
}

// runBulkGetAgainst builds simulated nodes in the cluster, each with a pod
// using its own secrets and its namespace's shared one, and fetches each
// node's secrets three ways with the node's credentials: a GET per secret
// from kube-apiserver (a quorum read from etcd, what a GET does by
// default), the same with resourceVersion=0 (from kube-apiserver's watch
// cache), and one bulk get from nodeproxy.
func runBulkGetAgainst(ctx context.Context, env *Env, t Target) (*Result, error) {
	r := &Result{Scenario: "bulkget"}
	nodes := min(env.Watch.Nodes, 20)
	shape := WatchShape{Nodes: nodes, SecretsPerNode: env.Watch.ChannelsPerNode - 1, Namespaces: min(10, nodes), ObjectSize: env.Watch.ObjectSize}
	c, cleanup, err := watchWorkload(ctx, env, t, "bulkget", shape)
	if err != nil {
		return interrupted(ctx, r, err)
	}
	defer cleanup()
	kubes := make([]kubernetes.Interface, nodes)
	bulks := make([]*bulkClient, nodes)
	want := make([]int, nodes)
	for n := range nodes {
		cfg, err := t.Node(c.nodeName(n))
		if err != nil {
			return nil, err
		}
		if kubes[n], err = kubernetes.NewForConfig(cfg); err != nil {
			return nil, err
		}
		if cfg, err = t.Bulk(c.nodeName(n)); err != nil {
			return nil, err
		}
		if bulks[n], err = newBulkClient(cfg); err != nil {
			return nil, err
		}
		want[n] = len(c.watched(n))
	}
	r.Figures = append(r.Figures, Figure{Name: "nodes", Value: float64(nodes)}, Figure{Name: "objects per node", Value: float64(want[0])})
	gets := func(rv string) func(ctx context.Context, n int) (int, error) {
		return func(ctx context.Context, n int) (int, error) {
			for i, ref := range c.watched(n) {
				if _, err := kubes[n].CoreV1().Secrets(ref[0]).Get(ctx, ref[1], metav1.GetOptions{ResourceVersion: rv}); err != nil {
					return i, err
				}
			}
			return want[n], nil
		}
	}
	err = fetchAll(ctx, env, r, want, []fetchWay{
		{name: "GETs on kube-apiserver", fetch: gets("")},
		{name: "GETs on kube-apiserver, resourceVersion=0", fetch: gets("0")},
		{name: "one bulk get from nodeproxy", fetch: func(ctx context.Context, n int) (int, error) {
			var ops []v1alpha1.GetOperation
			for _, ref := range c.watched(n) {
				ops = append(ops, namedOp("secrets", ref[0], ref[1]))
			}
			counts, err := bulks[n].get(ctx, ops)
			return total(counts), err
		}},
	})
	if err != nil {
		return interrupted(ctx, r, err)
	}
	return r, nil
}

func total(counts []int) int {
	t := 0
	for _, c := range counts {
		t += c
	}
	return t
}
