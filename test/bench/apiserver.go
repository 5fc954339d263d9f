package bench

import (
	"context"
	"fmt"
	"time"
)

var apiserverScenario = Scenario{
	Name: "apiserver",
	Help: "the status quo side by side: the same nodes watching the same secrets as individual watches on kube-apiserver and as one bulk watch each on nodeproxy (without --kubeconfig it starts a local control plane: run from a checkout)",
	// No Run: not part of an in-process run that names no scenario; it
	// needs kube-apiserver and etcd, built from this repository's
	// hack/tools, or a cluster.
	RunAgainst: runAPIServer,
}

func runAPIServer(ctx context.Context, env *Env, target Target) (*Result, error) {
	shape := WatchShape{
		Nodes: env.Watch.Nodes, SecretsPerNode: env.Watch.ChannelsPerNode - 1, Namespaces: min(10, env.Watch.Nodes),
		ObjectSize: env.Watch.ObjectSize, SharedUpdates: 10, Idle: 5 * env.PhaseDuration,
	}
	prepared, err := scenarioComparison(env, "apiserver", target, shape)
	if err != nil {
		return nil, err
	}
	c, err := prepared.compare(ctx)
	if err != nil {
		return nil, fmt.Errorf("apiserver: %w", err)
	}
	r := &Result{Scenario: "apiserver"}
	sq, np := c.StatusQuo, c.Nodeproxy
	secs := func(d time.Duration) float64 { return d.Seconds() }
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	ratio := func(quo, api, prox float64) float64 { return quo / (api + prox) }
	// Without nodeproxy's process in reach (a remote cluster), the "with"
	// side is kube-apiserver's alone, and says so.
	with := "kube-apiserver + nodeproxy"
	if !c.NodeproxyMeasured {
		with = "kube-apiserver with nodeproxy (nodeproxy not measured)"
	}
	r.Figures = []Figure{
		{"watches on kube-apiserver, status quo", float64(sq.APIServerWatches), ""},
		{"watches on kube-apiserver, with nodeproxy", float64(np.APIServerWatches), ""},
	}
	if c.NodeproxyMeasured {
		r.Figures = append(r.Figures, Figure{"channels on nodeproxy", float64(np.Channels), ""})
	}
	r.Figures = append(r.Figures, []Figure{
		{"CPU to open, kube-apiserver, status quo", secs(sq.APIServer.OpenCPU), "s"},
		{"CPU to open, " + with, secs(np.APIServer.OpenCPU) + secs(np.Nodeproxy.OpenCPU), "s"},
		{"CPU for the updates, kube-apiserver, status quo", secs(sq.APIServer.UpdateCPU), "s"},
		{"CPU for the updates, " + with, secs(np.APIServer.UpdateCPU) + secs(np.Nodeproxy.UpdateCPU), "s"},
		{"RSS, kube-apiserver, status quo", mib(sq.APIServer.RSSOpen), "MiB"},
		{"RSS, " + with, mib(np.APIServer.RSSOpen) + mib(np.Nodeproxy.RSSOpen), "MiB"},
		{"goroutines, kube-apiserver, status quo", float64(sq.APIServer.GoroutinesOpen), ""},
		{"goroutines, " + with, float64(np.APIServer.GoroutinesOpen + np.Nodeproxy.GoroutinesOpen), ""},
		{"ratio of watches on kube-apiserver", float64(sq.APIServerWatches) / float64(max(np.APIServerWatches, 1)), "x"},
		{"ratio of CPU to open", ratio(secs(sq.APIServer.OpenCPU), secs(np.APIServer.OpenCPU), secs(np.Nodeproxy.OpenCPU)), "x"},
		{"ratio of RSS", ratio(mib(sq.APIServer.RSSOpen), mib(np.APIServer.RSSOpen), mib(np.Nodeproxy.RSSOpen)), "x"},
		{"ratio of goroutines", ratio(float64(sq.APIServer.GoroutinesOpen), float64(np.APIServer.GoroutinesOpen), float64(np.Nodeproxy.GoroutinesOpen)), "x"},
	}...)
	return r, nil
}

// progressWriter sends CompareWatches' progress lines to the env's,
// prefixed with the scenario's name.
type progressWriter struct {
	env      *Env
	scenario string
}

func (p progressWriter) Write(b []byte) (int, error) {
	if p.env.Progress == nil {
		return len(b), nil
	}
	return p.env.Progress.Write(append([]byte(p.scenario+": "), b...))
}
