package hub_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// BenchmarkConsistentRead measures what resourceVersion "" costs over
// "0" for a node's named bulk get of its pod's secret (the node
// endpoint's translation of a kubelet's GET) on one replica, and how many
// questions to kube-apiserver N concurrent reads of one type cause:
//   - rv=0: the cache as it stands, no question;
//   - rv="": one question for kube-apiserver's version of secrets, then,
//     on a type quiet since its last bookmark, a consistent list of the
//     one secret;
//   - rv="", N concurrent: N reads at once, questions/op counts
//     nodeproxy_bulk_latest_version_requests_total per read (coalescing:
//     one in flight per type, one queued); lists/op counts the reads
//     confirmed by their own list (consistent_reads_total{result=
//     "confirmed"}), one request each.
//
// go test -run '^$' -bench ConsistentRead -benchtime 200x ./hub/
func BenchmarkConsistentRead(b *testing.B) {
	const ns, node = "consistent-bench", "node-consistent-bench"
	ctx := context.Background()
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		b.Fatal(err)
	}
	testserver.InstallRBAC(b, cp)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	writeSecret(b, admin, ns, "s", "0")
	podUsing(b, admin, ns, node, secretVolume("s"))
	srv := startReplica(b)
	nodeCfg, err := cp.NodeConfig(node)
	if err != nil {
		b.Fatal(err)
	}
	client := srv.Client(b, nodeCfg)
	read := func(b *testing.B, rv string) {
		if code, got, status := nodeGetsSecret(b, srv, client, ns, "s", rv); code != http.StatusCreated || len(got) != 1 {
			b.Fatalf("%d %v %+v", code, got, status)
		}
	}
	questions := func(b *testing.B) float64 {
		return gatheredSum(b, "nodeproxy_bulk_latest_version_requests_total", `resource="secrets"`)
	}
	// A read confirmed by the operation's own list (the type quiet since
	// its last bookmark) cost one more request.
	lists := func(b *testing.B) float64 {
		return gatheredSum(b, "nodeproxy_bulk_consistent_reads_total", `resource="secrets",result="confirmed"`)
	}
	for _, rv := range []string{"0", ""} {
		b.Run("rv="+map[string]string{"0": "0", "": `""`}[rv], func(b *testing.B) {
			read(b, rv)
			before, listed := questions(b), lists(b)
			for b.Loop() {
				read(b, rv)
			}
			b.ReportMetric((questions(b)-before)/float64(b.N), "questions/op")
			b.ReportMetric((lists(b)-listed)/float64(b.N), "lists/op")
		})
	}
	// 16 is the most bulk gets one caller may have in flight
	// (--bulk-get-max-in-flight-per-user).
	for _, n := range []int{4, 16} {
		b.Run(fmt.Sprintf("rv=\"\",concurrent=%d", n), func(b *testing.B) {
			before, listed := questions(b), lists(b)
			for b.Loop() {
				var wg sync.WaitGroup
				for range n {
					wg.Go(func() { read(b, "") })
				}
				wg.Wait()
			}
			b.ReportMetric((questions(b)-before)/float64(b.N*n), "questions/op")
			b.ReportMetric((lists(b)-listed)/float64(b.N*n), "lists/op")
		})
	}
}
