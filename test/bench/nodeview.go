package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	bulkwatch "github.com/nodeproxy/nodeproxy/bulk/watch"
	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// NodeViewLoad shapes the nodeview scenario.
type NodeViewLoad struct {
	// Nodes is how many hollow kubelets run, each behind its endpoint.
	Nodes int
	// PodsPerNode are bound to each, each mounting ObjectsPerPod secrets
	// and configmaps of its own (half each, secrets first): a node's copy
	// holds PodsPerNode x ObjectsPerPod of them, with its pods and Node.
	PodsPerNode, ObjectsPerPod int
	// Restarts are the kubelets restarted behind copy endpoints in the
	// second part, with the control plane up.
	Restarts int
	// Outage is how long kube-apiserver and the hub are stopped in the
	// third part; a third of the kubelets restart meanwhile.
	Outage time.Duration
	// Settle is how long, after the outage's checks, the hub's channels
	// are followed until they are one per node again: the kubelet's
	// watches that went to hub channels while the copies started over
	// come back to the copies only when they end, at the kubelet's
	// watch timeout (5 to 10 minutes). 0 skips it.
	Settle time.Duration
	// Services and EndpointSlices are made in the cluster besides the
	// scenario's own objects, 100 services to a namespace, the slices
	// spread over them; each node gets a pod in two of those namespaces,
	// so that its pods are in three. 0: none.
	Services, EndpointSlices int
	// CopyOnly skips the side with a channel per object (its figures
	// are 0), as a cluster of many services needs: the kubelet's list of
	// them over hub channels does not complete there (docs/benchmarks.md,
	// "The endpoint with many services in the cluster").
	CopyOnly bool
	// FillLog is how many changes of each type whose changes the nodes
	// make (pods, Nodes) are written before each reading of the hub's
	// heap, to fill its change logs (fillChangeLogs): the hub's
	// --cache-log-size for the heap figures to be a node's cost at any
	// cluster size. 0 writes none.
	FillLog int
	// Profiles, when set, is a directory the hub's heap profiles go to,
	// before and after each side's nodes (hub-heap-<side>-<when>.pprof),
	// for `go tool pprof -base`.
	Profiles string
}

// DefaultNodeViewLoad is the shape: 20 kubelets, each with 5
// pods of 20 objects, 100 secrets and configmaps in each node's copy,
// and a 2-minute outage, followed for 11 minutes after (a kubelet
// watch's longest timeout and a minute); the hub's change logs filled at
// its default size.
func DefaultNodeViewLoad() NodeViewLoad {
	return NodeViewLoad{Nodes: 20, PodsPerNode: 5, ObjectsPerPod: 20, Restarts: 1, Outage: 2 * time.Minute, Settle: 11 * time.Minute, FillLog: cache.DefaultLogSize}
}

// outageRestarts is how many kubelets restart during the outage: a
// third, at least one.
func (l NodeViewLoad) outageRestarts() int { return max(1, l.Nodes/3) }

var nodeViewScenario = Scenario{
	Name: "nodeview",
	Help: "hollow kubelets behind node endpoints, each with about 100 secrets and configmaps: the hub's channels and memory per node with a copy of the node's view " +
		"and with a channel per object (--node-view=false); requests leaving a node when its kubelet restarts; and a control-plane outage " +
		"(kube-apiserver and the hub stopped) with a third of the kubelets restarted meanwhile (local control plane only)",
	RunAgainst: runNodeView,
	LocalOnly:  true,
}

// nodeViewOutcome is what the three parts measured.
type nodeViewOutcome struct {
	load              NodeViewLoad
	perObject, copied viewFootprint
	restart           viewRestart
	outage            viewOutage
}

func runNodeView(ctx context.Context, env *Env, t Target) (_ *Result, err error) {
	if t.Local == nil || len(t.Local.NodeEndpoint) == 0 {
		return nil, errors.New("nodeview runs hollow kubelets and node endpoints on this machine: it needs the local control plane and a nodeproxy binary, not --kubeconfig")
	}
	l := env.NodeView
	kubemark, admin, run, dir, err := hollowRun(ctx, env, t, "bench-nodeview")
	if err != nil {
		return nil, err
	}
	// The sides share the kubelets scenario's pods and objects, shaped by
	// this scenario's load.
	kenv := *env
	kenv.Kubelets = KubeletLoad{Nodes: l.Nodes, PodsPerNode: l.PodsPerNode, ObjectsPerPod: l.ObjectsPerPod}
	base := sideRun{env: &kenv, t: t, admin: admin, ns: run}
	side := func(way string, round int) *viewSide {
		s := base
		s.way, s.nodes = way, make([]*HollowNode, l.Nodes)
		return &viewSide{sideRun: &s, round: round, kubemark: kubemark, load: l}
	}
	perObject, copied := side("per-object", 0), side("copy", 1)
	hubMetrics, err := t.Nodeproxy.Metrics(ctx)
	if err != nil {
		return nil, err
	}
	perObject.idleChannels = hubMetrics.Sum("nodeproxy_watchmux_channels")
	copied.idleChannels = perObject.idleChannels
	r := &Result{Scenario: "nodeview"}
	o := &nodeViewOutcome{load: l}
	defer func() {
		for _, s := range []*viewSide{perObject, copied} {
			for _, n := range s.nodes {
				if n != nil {
					n.Stop()
				}
			}
			err = errors.Join(err, cleanUp(ctx, admin, run+"-"+s.way))
		}
		err = errors.Join(err, cleanUp(ctx, admin, run))
		_ = os.RemoveAll(dir)
	}()
	if err := controlplane.EnsureNamespace(ctx, admin, run, map[string]string{benchLabel: run}); err != nil {
		return nil, err
	}
	if err := base.createObjects(ctx); err != nil {
		return nil, err
	}
	if err := base.createServices(ctx, l); err != nil {
		return nil, err
	}
	copied.secrets, perObject.secrets = base.secrets, base.secrets
	if l.FillLog > 0 {
		if err := base.makeFillers(ctx); err != nil {
			return nil, err
		}
	}

	// 1. Channels and memory: today's one channel per object, then the
	// copy, on the same objects.
	if err := perObjectSide(ctx, l, perObject, dir, &o.perObject); err != nil {
		return interrupted(ctx, r, err)
	}
	if o.copied, err = copied.start(ctx, dir, nil); err != nil {
		return interrupted(ctx, r, fmt.Errorf("nodeview, the copy: %w", err))
	}
	r.Figures = o.footprintFigures()

	// 2. A kubelet restart behind a copy endpoint.
	which := make([]int, min(l.Restarts, l.Nodes))
	for i := range which {
		which[i] = l.Nodes - 1 - i // the outage restarts the first third
	}
	if o.restart, err = copied.restartKubelets(ctx, which); err != nil {
		return interrupted(ctx, r, fmt.Errorf("nodeview, a kubelet restart: %w", err))
	}
	r.Figures = append(r.Figures, o.restartFigures()...)

	// 3. The outage.
	o.outage, err = copied.outage(ctx, l)
	if err == nil && l.Settle > 0 {
		err = copied.settle(ctx, l, &o.outage)
	}
	r.Figures = append(r.Figures, o.outageFigures()...)
	r.Latencies = []Latency{
		latencyOf("outage: restarted kubelet's pods Running with their files, offline", o.outage.upOffline),
		latencyOf("outage: secret update after the return to file", o.outage.fileLatencies),
	}
	if err != nil {
		return interrupted(ctx, r, fmt.Errorf("nodeview, the outage: %w", err))
	}
	o.writeTables(env)
	return r, nil
}

func (o *nodeViewOutcome) footprintFigures() []Figure {
	p, c := o.perObject, o.copied
	mib := func(b float64) float64 { return b / (1 << 20) }
	ratio := func(a, b float64) float64 {
		if b <= 0 {
			return 0
		}
		return a / b
	}
	l := o.load
	out := []Figure{
		{"hollow kubelets, each behind its endpoint", float64(l.Nodes), ""},
		{"secrets and configmaps per node (pods x objects)", float64(l.PodsPerNode * l.ObjectsPerPod), ""},
		{"channels and memory: hub channels per node, a channel per object (--node-view=false)", p.channels, ""},
		{"channels and memory: hub channels per node, the copy", c.channels, ""},
		{"channels and memory: hub node views open, the copy", c.views, ""},
		{"channels and memory: hub live heap per node, a channel per object", mib(p.heap), "MiB"},
		{"channels and memory: hub live heap per node, the copy", mib(c.heap), "MiB"},
		{"channels and memory: ratio of hub heap per node, a channel per object / the copy", ratio(p.heap, c.heap), "x"},
	}
	for _, t := range filledTypes {
		out = append(out,
			Figure{"channels and memory: the hub's changes of " + t + " per node, a channel per object (its log refilled before each heap reading)", p.changes[t], ""},
			Figure{"channels and memory: the hub's changes of " + t + " per node, the copy (its log refilled before each heap reading)", c.changes[t], ""})
	}
	out = append(out, []Figure{
		{"channels and memory: objects in each endpoint's copy, mean", c.copyObjects, ""},
		{"channels and memory: the kubelet's open watches per node, a channel per object: hub", p.watches["hub"], ""},
		{"channels and memory: the kubelet's open watches per node, a channel per object: kube-apiserver", p.watches["apiserver"], ""},
		{"channels and memory: the kubelet's open watches per node, the copy: copy", c.watches["copy"], ""},
		{"channels and memory: the kubelet's open watches per node, the copy: hub", c.watches["hub"], ""},
		{"channels and memory: the kubelet's open watches per node, the copy: kube-apiserver", c.watches["apiserver"], ""},
	}...)
	for _, k := range c.hubWatches.sortedKeys() {
		out = append(out, Figure{"channels and memory: the kubelets' watches off the copy, the copy, every node: " + k, c.hubWatches[k], ""})
	}
	return append(out, []Figure{
		{"channels and memory: endpoint RSS per node, a channel per object, mean", meanMiB(p.rss), "MiB"},
		{"channels and memory: endpoint RSS per node, the copy, mean", meanMiB(c.rss), "MiB"},
		{"channels and memory: endpoint RSS per node, the copy, max", maxMiB(c.rss), "MiB"},
		{"channels and memory: time to pods Running, a channel per object", p.upTook.Seconds(), "s"},
		{"channels and memory: time to pods Running, the copy", c.upTook.Seconds(), "s"},
	}...)
}

// perObjectSide runs part 1's side with a channel per object, unless
// l.CopyOnly, into f, and waits for the hub to let go of its channels.
func perObjectSide(ctx context.Context, l NodeViewLoad, side *viewSide, dir string, f *viewFootprint) (err error) {
	if l.CopyOnly {
		return nil
	}
	if *f, err = side.start(ctx, dir, []string{"--node-view=false"}); err != nil {
		return fmt.Errorf("nodeview, a channel per object: %w", err)
	}
	if err := side.stop(ctx); err != nil {
		return err
	}
	// The bulk watch lets go of a closed channel at its type's next
	// change or bookmark: for the secrets and configmaps, quiet now, up
	// to a bookmark interval after the side stopped. Measured before
	// that, what it lets go of later comes off the copy's figure.
	return sleepUntil(ctx, time.Now().Add(bulkwatch.DefaultBookmarkInterval+5*time.Second))
}
