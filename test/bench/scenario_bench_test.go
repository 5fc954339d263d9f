package bench

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/nodeproxy/nodeproxy/test/workload"
)

var (
	fanoutNodes    = flag.Int("fanout-nodes", 2000, "Fanout and Revoke benchmarks: nodes holding a websocket")
	fanoutChannels = flag.Int("fanout-channels", 30, "Fanout benchmark: channels per node")
)

// watchEnv is a cluster for the watch scenarios at benchmark scale: nodes
// of 10 pods in one namespace, each pod with two secrets and a configmap
// of its own and the namespace's one shared secret, so that every node
// watches channels objects and all of them watch the shared secret (as
// every pod mounts its namespace's kube-root-ca.crt).
func watchEnv(b *testing.B, nodes, channels int) *Env {
	shape := workload.Shape{Nodes: nodes, PodsPerNode: 10, Namespaces: 1, UniqueSecretsPerPod: 2, UniqueConfigMapsPerPod: 1,
		SharedSecretsPerPod: 1, SharedSecretsPerNamespace: 1, Seed: 1}
	c, err := workload.Generate(shape)
	if err != nil {
		b.Fatal(err)
	}
	return &Env{Shape: shape, Cluster: c, PhaseDuration: 2 * time.Second, RevokeRate: 200,
		Watch: WatchLoad{Nodes: nodes, ChannelsPerNode: channels, ObjectSize: 1024, Updates: 500}}
}

// reportResult reports r's figures and latencies (p50 and p99, in ms) as
// benchmark metrics.
func reportResult(b *testing.B, r *Result) {
	slug := func(s string) string { return strings.NewReplacer(" ", "-", "(", "", ")", "", ",", "").Replace(s) }
	for _, f := range r.Figures {
		unit := slug(f.Name)
		if f.Unit != "" {
			unit += "-" + strings.ReplaceAll(f.Unit, "/", "per-")
		}
		b.ReportMetric(f.Value, unit)
	}
	for _, l := range r.Latencies {
		b.ReportMetric(l.P50/1000, slug(l.Name)+"-p50-ms")
		b.ReportMetric(l.P99/1000, slug(l.Name)+"-p99-ms")
	}
}

// BenchmarkFanout is the fanout scenario at -fanout-nodes websockets
// (default 2,000) of -fanout-channels channels (default 30) over TLS on
// loopback, clients in the same process: heap per connection and per
// idle channel, the time for one update of the shared secret to reach
// every node, and events delivered per second (median round).
//
//	go test ./test/bench -run '^$' -bench '^BenchmarkFanout$' -benchtime 1x
func BenchmarkFanout(b *testing.B) {
	env := watchEnv(b, *fanoutNodes, *fanoutChannels)
	for b.Loop() {
		r, err := fanoutScenario.Run(context.Background(), env)
		if err != nil {
			b.Fatal(err)
		}
		reportResult(b, r)
	}
}

// BenchmarkRevoke is the revoke scenario: -fanout-nodes nodes each watch
// a secret of their first pod, those pods are deleted at 200 per second,
// and each is timed from the cache taking the deletion in to the node
// reading ERROR 403.
//
//	go test ./test/bench -run '^$' -bench '^BenchmarkRevoke$' -benchtime 1x
func BenchmarkRevoke(b *testing.B) {
	env := watchEnv(b, *fanoutNodes, 1)
	for b.Loop() {
		r, err := revokeScenario.Run(context.Background(), env)
		if err != nil {
			b.Fatal(err)
		}
		reportResult(b, r)
	}
}
