package bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/nodeproxy/nodeproxy/test/workload"
)

var fanoutScenario = Scenario{
	Name:       "fanout",
	Help:       "nodes holding bulk watches on websockets: time for one update to reach every subscriber, sustained events/s, memory per channel (with --kubeconfig: updates written through kube-apiserver, read through its aggregator)",
	Run:        runFanout,
	RunAgainst: runFanoutAgainst,
}

// WatchLoad is who watches in the fanout and revoke scenarios.
type WatchLoad struct {
	// Nodes hold one websocket each (at most the shape's nodes).
	Nodes int
	// ChannelsPerNode caps the channels of a node: one per secret and
	// configmap its pods use, first pod first.
	ChannelsPerNode int
	// ObjectSize is the bytes of data in each secret and configmap.
	ObjectSize int
	// Updates is how many updates of the most watched secret one
	// sustained round makes (under a channel's queue of 1024).
	Updates int
}

// DefaultWatchLoad is 500 nodes x 30 channels of 1 KiB objects.
func DefaultWatchLoad() WatchLoad {
	return WatchLoad{Nodes: 500, ChannelsPerNode: 30, ObjectSize: 1024, Updates: 500}
}

// subscription is one channel a node asks for.
type subscription struct {
	resource, namespace, name string
}

// subscriptions lists node n's channels: the secrets and configmaps its
// pods use, in pod order, without repeats, at most max.
func subscriptions(s workload.Shape, c *workload.Cluster, n, max int) []subscription {
	var out []subscription
	seen := map[subscription]bool{}
	for _, pod := range c.Pods[n*s.PodsPerNode : (n+1)*s.PodsPerNode] {
		for _, v := range pod.Spec.Volumes {
			var sub subscription
			switch {
			case v.Secret != nil:
				sub = subscription{"secrets", pod.Namespace, v.Secret.SecretName}
			case v.ConfigMap != nil:
				sub = subscription{"configmaps", pod.Namespace, v.ConfigMap.Name}
			default:
				continue
			}
			if !seen[sub] {
				seen[sub] = true
				out = append(out, sub)
				if len(out) == max {
					return out
				}
			}
		}
	}
	return out
}

func runFanout(ctx context.Context, env *Env) (*Result, error) {
	r := &Result{Scenario: "fanout"}
	load := env.Watch
	nodes := min(load.Nodes, env.Shape.Nodes)
	p, err := startInProcess(ctx, env.Cluster, load.ObjectSize)
	if err != nil {
		return nil, err
	}
	defer p.stop()

	subs := make([][]subscription, nodes)
	counts := map[subscription]int{}
	for n := range nodes {
		subs[n] = subscriptions(env.Shape, env.Cluster, n, load.ChannelsPerNode)
		for _, s := range subs[n] {
			if s.resource == "secrets" {
				counts[s]++
			}
		}
	}
	var target subscription
	for s, n := range counts {
		if n > counts[target] || (n == counts[target] && fmt.Sprint(s) < fmt.Sprint(target)) {
			target = s
		}
	}
	if counts[target] == 0 {
		return nil, fmt.Errorf("fanout: the watching nodes' pods use no secret: nothing to update")
	}

	var watchers fleet
	defer watchers.close()
	base := heapInUse()
	if err := watchers.dial(ctx, env, p, nodes, load.ObjectSize+512, "fanout: %d nodes connecting", nodes); err != nil {
		return interrupted(ctx, r, fmt.Errorf("fanout: %w", err))
	}
	clients := watchers.clients
	connected := heapInUse()

	channels := 0
	bar := env.phase(nodes, "fanout: opening the channels (%d on %s/%s)", counts[target], target.namespace, target.name)
	for n, c := range clients {
		if err := c.subscribe(subs[n], target); err != nil {
			return interrupted(ctx, r, fmt.Errorf("fanout: node %d: %w", n, err))
		}
		channels += len(subs[n])
		watchers.read(c)
		bar.Add(1)
	}
	bar.Done()
	opened := heapInUse()
	r.Figures = append(r.Figures,
		Figure{Name: "connections", Value: float64(nodes), Unit: ""},
		Figure{Name: "channels", Value: float64(channels), Unit: ""},
		Figure{Name: "heap per connection (both ends)", Value: float64(connected-base) / float64(nodes) / 1024, Unit: "KiB"},
		Figure{Name: "heap per idle channel", Value: float64(opened-connected) / float64(channels), Unit: "B"},
	)

	// One update at a time, until every subscriber has it.
	var subscribers []*heard
	for _, c := range clients {
		if c.target != 0 {
			subscribers = append(subscribers, &c.onTarget)
		}
	}
	var took []time.Duration
	env.progressf("fanout: single updates of %s/%s to %d subscribers", target.namespace, target.name, len(subscribers))
	deadline := time.Now().Add(env.PhaseDuration)
	for round := 0; round < 3 || time.Now().Before(deadline); round++ {
		if ctx.Err() != nil {
			break
		}
		want := make([]int64, len(subscribers))
		for i, h := range subscribers {
			want[i] = h.events.Load() + 1
		}
		start := time.Now()
		if err := p.updateSecret(target.namespace, target.name, load.ObjectSize, round); err != nil {
			return nil, err
		}
		if err := waitHeard(ctx, nil, subscribers, func(i int) int64 { return want[i] }); err != nil {
			return interrupted(ctx, r, fmt.Errorf("fanout: %w", err))
		}
		for _, h := range subscribers {
			took = append(took, h.since(start))
		}
	}
	r.Latencies = append(r.Latencies, latencyOf(fmt.Sprintf("one update to all %d subscribers", len(subscribers)), took))

	// Sustained: rounds of back-to-back updates.
	env.progressf("fanout: rounds of %d back-to-back updates", load.Updates)
	var rates []float64
	deadline = time.Now().Add(env.PhaseDuration)
	for round := 0; round < 3 || time.Now().Before(deadline); round++ {
		if ctx.Err() != nil {
			break
		}
		want := make([]int64, len(subscribers))
		for i, h := range subscribers {
			want[i] = h.events.Load() + int64(load.Updates)
		}
		start := time.Now()
		for k := range load.Updates {
			if err := p.updateSecret(target.namespace, target.name, load.ObjectSize, 1000*(round+1)+k); err != nil {
				return nil, err
			}
		}
		if err := waitHeard(ctx, nil, subscribers, func(i int) int64 { return want[i] }); err != nil {
			return interrupted(ctx, r, fmt.Errorf("fanout: %w", err))
		}
		rates = append(rates, float64(len(subscribers)*load.Updates)/time.Since(start).Seconds())
	}
	if len(rates) > 0 {
		slices.Sort(rates)
		r.Figures = append(r.Figures, Figure{Name: "events delivered, median round", Value: rates[len(rates)/2], Unit: "/s"})
	}
	var errs int64
	for _, c := range clients {
		errs += c.errors.Load()
	}
	if errs > 0 {
		return nil, fmt.Errorf("fanout: %d channels ended with an ERROR during the run", errs)
	}
	runtime.KeepAlive(clients)
	if ctx.Err() != nil {
		return interrupted(ctx, r, ctx.Err())
	}
	return r, nil
}
