package bench

import (
	"context"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

var (
	cp  *controlplane.ControlPlane
	bin string // the nodeproxy binary under test
)

// TestMain builds nodeproxy and starts a control plane with kube-apiserver's
// default authorizers (Node, then RBAC): the status quo a kubelet's watches
// are measured against.
func TestMain(m *testing.M) {
	os.Exit(testserver.RunTestsWithNodeproxy(m, controlplane.Options{}, &cp, &bin))
}

// startNodeproxy runs nodeproxy serve in front of the control plane until
// the test ends.
func startNodeproxy(tb testing.TB) *controlplane.Nodeproxy {
	tb.Helper()
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		tb.Fatal(err)
	}
	np, err := cp.StartNodeproxy(context.Background(), bin, ports[0])
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(np.Process.Stop)
	return np
}

// localTarget is the harness's control plane with np in front of it.
func localTarget(tb testing.TB, np *controlplane.Nodeproxy) Target {
	tb.Helper()
	target, err := LocalTarget(cp, np, controlplane.NodeEndpointCommand(bin))
	if err != nil {
		tb.Fatal(err)
	}
	return target
}

// TestCompareWatchesDeliversEverything runs the comparison small: both
// ways must open every watch, authorized as the nodes, and deliver every
// update to every watcher, and the figures must come from the processes.
func TestCompareWatchesDeliversEverything(t *testing.T) {
	np := startNodeproxy(t)
	shape := WatchShape{Nodes: 6, SecretsPerNode: 3, Namespaces: 2, ObjectSize: 64, SharedUpdates: 2, Idle: 0}
	var log strings.Builder
	r, err := CompareWatches(context.Background(), localTarget(t, np), shape, &log)
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, log.String())
	}
	want := int64(shape.Nodes * (shape.SharedUpdates + 1))
	for _, way := range []WayResult{r.Nodeproxy, r.StatusQuo} {
		if way.Events != want {
			t.Errorf("%s: %d events delivered, want %d", way.Way, way.Events, want)
		}
		if way.APIServer.OpenCPU <= 0 || way.APIServer.RSSOpen <= 0 || way.Nodeproxy.RSSOpen <= 0 {
			t.Errorf("%s: figures not read from the processes: %+v", way.Way, way)
		}
	}
	if r.Nodeproxy.Channels != shape.Watches() {
		t.Errorf("nodeproxy had %d channels open, want %d", r.Nodeproxy.Channels, shape.Watches())
	}
	if added := r.StatusQuo.APIServerWatches - r.StatusQuo.APIServerWatchesBefore; added < shape.Watches() {
		t.Errorf("the nodes added %d watches on kube-apiserver in the status quo, want at least %d", added, shape.Watches())
	}
	if added := r.Nodeproxy.APIServerWatches - r.Nodeproxy.APIServerWatchesBefore; added > 0 {
		t.Errorf("the nodes added %d watches on kube-apiserver when they watched through nodeproxy, want none", added)
	}
	var table strings.Builder
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())
}

func TestWatchShapeValidate(t *testing.T) {
	for _, tc := range []struct {
		shape WatchShape
		want  string
	}{
		{WatchShape{Nodes: 0, SecretsPerNode: 1, Namespaces: 1, ObjectSize: 1}, "nodes must be positive, got 0"},
		{WatchShape{Nodes: 2, SecretsPerNode: 1, Namespaces: 3, ObjectSize: 1}, "namespaces (3) must not outnumber nodes (2)"},
		{WatchShape{Nodes: 2, SecretsPerNode: 1, Namespaces: 1, ObjectSize: 1, SharedUpdates: -1}, "shared updates must not be negative"},
		{WatchShape{Nodes: 2, SecretsPerNode: 0, Namespaces: 1, ObjectSize: -5}, "object size must be positive, got -5"},
	} {
		err := tc.shape.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error saying %q", tc.shape, err, tc.want)
		}
	}
	if err := DefaultWatchShape().Validate(); err != nil {
		t.Errorf("default shape: %v", err)
	}
}

var (
	versusNodes   = flag.Int("versus-nodes", DefaultWatchShape().Nodes, "CompareWatches benchmark: nodes")
	versusSecrets = flag.Int("versus-secrets", DefaultWatchShape().SecretsPerNode, "CompareWatches benchmark: own secrets per node")
	versusIdle    = flag.Duration("versus-idle", DefaultWatchShape().Idle, "CompareWatches benchmark: idle phase")
)

// BenchmarkCompareWatches is the status quo side by side with nodeproxy
// (see CompareWatches), at 500 nodes x 30 watches unless -versus-nodes
// and -versus-secrets say otherwise. It prints the table and reports the
// ratios of the status quo to nodeproxy's way (both servers counted).
//
//	go test ./test/bench -run '^$' -bench CompareWatches -benchtime 1x -timeout 30m
func BenchmarkCompareWatches(b *testing.B) {
	for b.Loop() {
		np := startNodeproxy(b)
		shape := DefaultWatchShape()
		shape.Nodes, shape.SecretsPerNode, shape.Idle = *versusNodes, *versusSecrets, *versusIdle
		shape.Namespaces = min(shape.Namespaces, shape.Nodes)
		r, err := CompareWatches(context.Background(), localTarget(b, np), shape, os.Stderr)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.WriteTable(os.Stdout); err != nil {
			b.Fatal(err)
		}
		np.Process.Stop()
		sq, with := r.StatusQuo, r.Nodeproxy
		ratio := func(quo, api, prox float64) float64 { return quo / (api + prox) }
		b.ReportMetric(ratio(sq.APIServer.OpenCPU.Seconds(), with.APIServer.OpenCPU.Seconds(), with.Nodeproxy.OpenCPU.Seconds()), "open-cpu-ratio")
		b.ReportMetric(ratio(sq.APIServer.UpdateCPU.Seconds(), with.APIServer.UpdateCPU.Seconds(), with.Nodeproxy.UpdateCPU.Seconds()), "update-cpu-ratio")
		b.ReportMetric(ratio(float64(sq.APIServer.RSSOpen), float64(with.APIServer.RSSOpen), float64(with.Nodeproxy.RSSOpen)), "rss-ratio")
		b.ReportMetric(float64(sq.APIServerWatches)/float64(max(with.APIServerWatches, 1)), "apiserver-watch-ratio")
	}
}

// TestAPIServerScenario runs the apiserver scenario small against the
// harness's control plane, with nodeproxy started as the scenario starts
// it.
func TestAPIServerScenario(t *testing.T) {
	env := &Env{
		PhaseDuration: 10 * time.Millisecond,
		Watch:         WatchLoad{Nodes: 4, ChannelsPerNode: 3, ObjectSize: 64, Updates: 10},
	}
	r, err := apiserverScenario.RunAgainst(context.Background(), env, localTarget(t, startNodeproxy(t)))
	if err != nil {
		t.Fatal(err)
	}
	figures := map[string]float64{}
	for _, f := range r.Figures {
		figures[f.Name] = f.Value
	}
	if got := figures["channels on nodeproxy"]; got != 12 {
		t.Errorf("channels on nodeproxy = %v, want 4 nodes x 3", got)
	}
	if figures["watches on kube-apiserver, status quo"] < figures["watches on kube-apiserver, with nodeproxy"]+12 {
		t.Errorf("the status quo added fewer than 12 watches on kube-apiserver: %v", figures)
	}
}
