package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/shard"
)

// ShardsLoad shapes the shards scenario.
type ShardsLoad struct {
	// Nodes are the cluster's nodes (Node objects, no kubelets), and
	// PodsPerNode the pods bound to each.
	Nodes, PodsPerNode int
	// Replicas is how many sharded replicas run.
	Replicas int
	// WriteRate is pod updates a second, over every pod, while a
	// replica is lost.
	WriteRate int
	// Settle is how long writes go on before the replica goes, and
	// after.
	Settle time.Duration
}

// DefaultShardsLoad is issue 38's shape: 1,000 nodes of 30 pods on 3
// replicas.
func DefaultShardsLoad() ShardsLoad {
	return ShardsLoad{Nodes: 1000, PodsPerNode: 30, Replicas: 3, WriteRate: 100, Settle: 5 * time.Second}
}

var shardsScenario = Scenario{
	Name: "shards",
	Help: "a cluster of Node objects and bound pods, cached by one unsharded replica and by sharded replicas (a StatefulSet's, their headless Service played by the bench): " +
		"pods held and live heap per replica; then a node view per node through the Service, redirected to its owner, and the owner of a third of them killed under pod writes: " +
		"time until every view resumed, events lost and repeated, views reopened whole (local control plane only)",
	RunAgainst: runShards,
	LocalOnly:  true,
}

// shardsNamespace holds the scenario's pods and configmaps.
const shardsNamespace = "bench-shards"

// shardsService is the headless Service the bench plays the endpoints
// controller of, in the hub's namespace.
const shardsService = "nodeproxy-bench-shards"

func shardNode(i int) string   { return "shards-node-" + strconv.Itoa(i) }
func shardMember(i int) string { return "nodeproxy-shard-" + strconv.Itoa(i) }

func runShards(ctx context.Context, env *Env, t Target) (*Result, error) {
	if t.Local == nil {
		return nil, errors.New("shards: needs the local control plane")
	}
	load := env.Shards
	if load.Replicas < 2 {
		return nil, fmt.Errorf("shards: %d replicas: sharding needs two at least", load.Replicas)
	}
	r := &Result{Scenario: "shards"}
	kube, err := kubernetes.NewForConfig(t.Admin)
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	c := &shardsCluster{env: env, kube: kube, load: load}
	if err := c.create(ctx); err != nil {
		return interrupted(ctx, r, err)
	}
	// Every bound pod of the cluster, not the scenario's alone: a
	// replica holds whatever pods fall in its ranges.
	byNode, bound, err := boundPods(ctx, kube)
	if err != nil {
		return interrupted(ctx, r, err)
	}

	// The unsharded replica: the target's own hub, which holds every pod.
	env.progressf("shards: the unsharded replica's pods and heap")
	one, err := replicaFootprint(ctx, t.Local.Hub, bound)
	if err != nil {
		return interrupted(ctx, r, fmt.Errorf("the unsharded replica: %w", err))
	}
	r.Figures = append(r.Figures,
		Figure{Name: "unsharded: pods held", Value: one.pods},
		Figure{Name: "unsharded: live heap", Value: one.heap / (1 << 20), Unit: "MiB"})

	shards, err := startShards(ctx, env, t.Local, kube, load)
	if err != nil {
		return interrupted(ctx, r, err)
	}
	defer shards.stop()
	table := shard.NewTable(shards.members())
	owned := map[string]float64{}
	for node, n := range byNode {
		owned[table.OwnerOf(node)] += n
	}
	var worst float64
	for i, np := range shards.live {
		name := shardMember(i)
		held := 0.0
		for node, n := range byNode {
			if table.Held(name).HasNode(node) {
				held += n
			}
		}
		f, err := replicaFootprint(ctx, np, held)
		if err != nil {
			return interrupted(ctx, r, fmt.Errorf("replica %s: %w", name, err))
		}
		dev := owned[name]/(bound/float64(load.Replicas)) - 1
		worst = max(worst, dev, -dev)
		r.Figures = append(r.Figures,
			Figure{Name: name + ": pods owned (of " + strconv.Itoa(int(bound)) + " bound)", Value: owned[name]},
			Figure{Name: name + ": pods held (owned and warm)", Value: f.pods},
			Figure{Name: name + ": pods held, by the table", Value: held},
			Figure{Name: name + ": live heap", Value: f.heap / (1 << 20), Unit: "MiB"},
			Figure{Name: name + ": live heap, of the unsharded replica's", Value: 100 * f.heap / one.heap, Unit: "%"})
	}
	r.Figures = append(r.Figures, Figure{Name: "pods owned: the largest deviation from a third", Value: 100 * worst, Unit: "%"})

	out, err := shards.loseOne(ctx, c, table)
	if out != nil {
		r.Figures = append(r.Figures, out.figures()...)
		r.Latencies = append(r.Latencies, latencyOf("owner killed to view resumed", out.resumeTimes))
	}
	if err != nil {
		return interrupted(ctx, r, err)
	}
	return r, nil
}

// members are the sharded replicas' names, in order.
func (s *shardReplicas) members() []string {
	out := make([]string, len(s.live))
	for i := range s.live {
		out[i] = shardMember(i)
	}
	return slices.Clip(out)
}

// boundPods counts the cluster's pods bound to each node, and in all.
func boundPods(ctx context.Context, kube kubernetes.Interface) (map[string]float64, float64, error) {
	byNode := map[string]float64{}
	var bound float64
	opts := metav1.ListOptions{Limit: 5000}
	for {
		list, err := kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, 0, fmt.Errorf("list the cluster's pods: %w", err)
		}
		for _, p := range list.Items {
			if p.Spec.NodeName != "" {
				byNode[p.Spec.NodeName]++
				bound++
			}
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			return byNode, bound, nil
		}
	}
}
