package bench

import (
	"context"
	"errors"
	"fmt"
	"time"
)

var apiserverScenario = Scenario{
	Name: "apiserver",
	Help: "the status quo side by side: the same nodes watching the same secrets as individual watches on kube-apiserver and as one bulk watch each on nodeproxy (starts a local control plane; run from a checkout)",
	Run:  runAPIServer,
	// Not part of a run that names no scenario: it needs kube-apiserver
	// and etcd, built from this repository's hack/tools.
	NeedsControlPlane: true,
}

// StartTarget starts a control plane with nodeproxy in front of it and
// returns what stops both.
type StartTarget func(ctx context.Context) (Target, func(), error)

func runAPIServer(ctx context.Context, env *Env) (*Result, error) {
	if env.StartTarget == nil {
		return nil, errors.New("apiserver: no control plane to start here")
	}
	shape := WatchShape{
		Nodes: env.Watch.Nodes, SecretsPerNode: env.Watch.ChannelsPerNode - 1, Namespaces: min(10, env.Watch.Nodes),
		ObjectSize: env.Watch.ObjectSize, SharedUpdates: 10, Idle: 5 * env.PhaseDuration,
	}
	if err := shape.Validate(); err != nil {
		return nil, fmt.Errorf("apiserver: %w", err)
	}
	env.progressf("apiserver: starting etcd, kube-apiserver (Node and RBAC authorizers) and nodeproxy serve")
	target, stop, err := env.StartTarget(ctx)
	if err != nil {
		return nil, fmt.Errorf("apiserver: %w", err)
	}
	defer stop()
	c, err := CompareWatches(ctx, target, shape, progressWriter{env})
	if err != nil {
		return nil, fmt.Errorf("apiserver: %w", err)
	}
	r := &Result{Scenario: "apiserver"}
	sq, np := c.StatusQuo, c.Nodeproxy
	secs := func(d time.Duration) float64 { return d.Seconds() }
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	ratio := func(quo, api, prox float64) float64 { return quo / (api + prox) }
	r.Figures = []Figure{
		{"watches on kube-apiserver, status quo", float64(sq.APIServerWatches), ""},
		{"watches on kube-apiserver, with nodeproxy", float64(np.APIServerWatches), ""},
		{"channels on nodeproxy", float64(np.Channels), ""},
		{"CPU to open, kube-apiserver, status quo", secs(sq.APIServer.OpenCPU), "s"},
		{"CPU to open, kube-apiserver + nodeproxy", secs(np.APIServer.OpenCPU) + secs(np.Nodeproxy.OpenCPU), "s"},
		{"CPU for the updates, kube-apiserver, status quo", secs(sq.APIServer.UpdateCPU), "s"},
		{"CPU for the updates, kube-apiserver + nodeproxy", secs(np.APIServer.UpdateCPU) + secs(np.Nodeproxy.UpdateCPU), "s"},
		{"RSS, kube-apiserver, status quo", mib(sq.APIServer.RSSOpen), "MiB"},
		{"RSS, kube-apiserver + nodeproxy", mib(np.APIServer.RSSOpen) + mib(np.Nodeproxy.RSSOpen), "MiB"},
		{"goroutines, kube-apiserver, status quo", float64(sq.APIServer.GoroutinesOpen), ""},
		{"goroutines, kube-apiserver + nodeproxy", float64(np.APIServer.GoroutinesOpen + np.Nodeproxy.GoroutinesOpen), ""},
		{"ratio of watches on kube-apiserver", float64(sq.APIServerWatches) / float64(max(np.APIServerWatches, 1)), "x"},
		{"ratio of CPU to open", ratio(secs(sq.APIServer.OpenCPU), secs(np.APIServer.OpenCPU), secs(np.Nodeproxy.OpenCPU)), "x"},
		{"ratio of RSS", ratio(mib(sq.APIServer.RSSOpen), mib(np.APIServer.RSSOpen), mib(np.Nodeproxy.RSSOpen)), "x"},
		{"ratio of goroutines", ratio(float64(sq.APIServer.GoroutinesOpen), float64(np.APIServer.GoroutinesOpen), float64(np.Nodeproxy.GoroutinesOpen)), "x"},
	}
	return r, nil
}

// progressWriter sends CompareWatches' progress lines to the env's.
type progressWriter struct{ env *Env }

func (p progressWriter) Write(b []byte) (int, error) {
	if p.env.Progress == nil {
		return len(b), nil
	}
	return p.env.Progress.Write(append([]byte("apiserver: "), b...))
}
