package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// KubeletLoad shapes the kubelets scenario.
type KubeletLoad struct {
	// Nodes is how many hollow kubelets run, each about 80 MB.
	Nodes int
	// PodsPerNode are bound to each in every round.
	PodsPerNode int
	// ObjectsPerPod are the secrets and configmaps (half each, secrets
	// first) each pod mounts, its own.
	ObjectsPerPod int
	// Pairs of rounds run on each side: one round with pods that mount
	// emptyDir volumes, one with the same pods mounting their objects
	// in their place. The
	// difference is what the secrets and configmaps cost; the pairs
	// give it a median.
	Pairs int
	// Round is how long a round lasts: a quarter to bring the pods up,
	// half to update every secret and see the files change, a quarter
	// to delete the pods. Both kinds of round last the same, so that
	// they hear the same background (node status, leases) and their
	// difference is the objects' alone.
	Round time.Duration
	// Idle is how long the servers and endpoints are watched with
	// nothing changing, the mounting pods running, after the rounds.
	Idle time.Duration
}

// DefaultKubeletLoad is the floor: 20 kubelets, pods with at
// least 5 secrets and configmaps. A round of 48 s holds the slowest
// update (a kubelet rewrites a pod's volumes only at its next sync;
// docs/benchmarks.md, "Real kubelets") inside its 24 s.
func DefaultKubeletLoad() KubeletLoad {
	return KubeletLoad{Nodes: 20, PodsPerNode: 2, ObjectsPerPod: 6, Pairs: 2, Round: 48 * time.Second, Idle: 30 * time.Second}
}

var kubeletsScenario = Scenario{
	Name: "kubelets",
	Help: "real kubelet code (hollow kubelets) running pods that mount secrets and configmaps: straight on kube-apiserver, then each behind a nodeproxy node endpoint " +
		"(local control plane only: run from a checkout)",
	RunAgainst: runKubelets,
	LocalOnly:  true,
}

func runKubelets(ctx context.Context, env *Env, t Target) (*Result, error) {
	if t.Local == nil {
		return nil, errors.New("kubelets runs hollow kubelets and node endpoints on this machine: it needs the local control plane, not --kubeconfig")
	}
	if len(t.Local.NodeEndpoint) == 0 {
		return nil, errors.New("kubelets needs a nodeproxy binary to run as node endpoints")
	}
	l := env.Kubelets
	tools, err := controlplane.EnsureTools(ctx, env.Progress, "kubemark")
	if err != nil {
		return nil, err
	}
	r := &Result{Scenario: "kubelets"}
	direct, err := runKubeletSide(ctx, env, t, tools["kubemark"], false)
	if err != nil {
		return interrupted(ctx, r, fmt.Errorf("kubelets straight on kube-apiserver: %w", err))
	}
	consistentBefore, waitsBefore, err := hubConsistency(ctx, t)
	if err != nil {
		return nil, err
	}
	fronted, err := runKubeletSide(ctx, env, t, tools["kubemark"], true)
	if err != nil {
		return interrupted(ctx, r, fmt.Errorf("kubelets behind node endpoints: %w", err))
	}
	consistentAfter, waitsAfter, err := hubConsistency(ctx, t)
	if err != nil {
		return nil, err
	}
	secs := func(d time.Duration) float64 { return d.Seconds() }
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	var epSum, epMax int64
	for _, b := range fronted.endpointRSS {
		epSum += b
		epMax = max(epMax, b)
	}
	d, f := direct.objectsCost(), fronted.objectsCost()
	r.Figures = []Figure{
		{"hollow kubelets", float64(l.Nodes), ""},
		{"pods per round", float64(l.Nodes * l.PodsPerNode), ""},
		{"secrets and configmaps mounted", float64(l.Nodes * l.PodsPerNode * l.ObjectsPerPod), ""},
		{"their watches on kube-apiserver, direct", direct.watches, ""},
		{"their watches on kube-apiserver, behind endpoints", fronted.watches, ""},
		{"kube-apiserver CPU a round, bare pods, direct", secs(d.bareCPU), "s"},
		{"kube-apiserver CPU a round, mounting pods, direct", secs(d.mountingCPU), "s"},
		{"kube-apiserver CPU a round, bare pods, behind endpoints", secs(f.bareCPU), "s"},
		{"kube-apiserver CPU a round, mounting pods, behind endpoints", secs(f.mountingCPU), "s"},
		{"kube-apiserver CPU for the objects a round, direct", secs(d.cpu), "s"},
		{"kube-apiserver CPU for the objects a round, behind endpoints", secs(f.cpu), "s"},
		{"kube-apiserver CPU for the objects, lowest pair, direct", secs(d.cpuLow), "s"},
		{"kube-apiserver CPU for the objects, highest pair, direct", secs(d.cpuHigh), "s"},
		{"kube-apiserver CPU for the objects, lowest pair, behind endpoints", secs(f.cpuLow), "s"},
		{"kube-apiserver CPU for the objects, highest pair, behind endpoints", secs(f.cpuHigh), "s"},
		{"hub CPU for the objects a round, behind endpoints", secs(f.hubCPU), "s"},
		{"kube-apiserver live heap for the objects, direct", mib(d.heap), "MiB"},
		{"kube-apiserver live heap for the objects, behind endpoints", mib(f.heap), "MiB"},
		{"kube-apiserver goroutines for the objects, direct", d.goroutines, ""},
		{"kube-apiserver goroutines for the objects, behind endpoints", f.goroutines, ""},
		{fmt.Sprintf("kube-apiserver CPU, idle %s, direct", l.Idle), secs(direct.apiIdle), "s"},
		{fmt.Sprintf("kube-apiserver CPU, idle %s, behind endpoints", l.Idle), secs(fronted.apiIdle), "s"},
		{fmt.Sprintf("endpoint CPU per node, idle %s, mean", l.Idle), secs(fronted.endpointIdle), "s"},
		{"time to mounting pods Running, direct, median", secs(d.upTook), "s"},
		{"time to mounting pods Running, behind endpoints, median", secs(f.upTook), "s"},
		{"rounds longer than --kubelet-round", float64(direct.overran() + fronted.overran()), ""},
		{"endpoint RSS per node, mean", mib(epSum / int64(max(len(fronted.endpointRSS), 1))), "MiB"},
		{"endpoint RSS per node, max", mib(epMax), "MiB"},
	}
	r.Figures = append(r.Figures, requestFigures(d.requests, f.requests)...)
	r.Figures = append(r.Figures, consistencyFigures(consistentBefore, consistentAfter, waitsBefore, waitsAfter, len(fronted.rounds))...)
	r.Latencies = []Latency{
		latencyOf("secret update to file, direct", direct.latencies()),
		latencyOf("secret update to file, behind endpoints", fronted.latencies()),
	}
	return r, nil
}

// kubeletWatches is kube-apiserver's count of secrets and configmaps
// watches now.
func kubeletWatches(ctx context.Context, t Target) (float64, error) {
	m, err := t.APIServer.Metrics(ctx)
	if err != nil {
		return 0, err
	}
	return m.Sum("apiserver_longrunning_requests", "verb", "WATCH", "resource", "secrets") +
		m.Sum("apiserver_longrunning_requests", "verb", "WATCH", "resource", "configmaps"), nil
}

// serverUsage reads kube-apiserver's and the hub's usage, both on this
// machine.
func serverUsage(t Target) (api, hub Usage, err error) {
	if api, err = t.APIServer.Usage(); err != nil {
		return api, hub, err
	}
	hub, err = t.Nodeproxy.Usage()
	return api, hub, err
}

// requestFigures name the requests the objects added to kube-apiserver's
// rounds, on either side, by verb and resource: where its CPU for them
// goes.
func requestFigures(direct, fronted requestCounts) []Figure {
	return sideBySide("kube-apiserver requests for the objects a round", direct, fronted)
}
