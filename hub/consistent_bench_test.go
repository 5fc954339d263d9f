package hub_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// BenchmarkConsistentRead measures what resourceVersion "" costs over
// "0" for a node's named bulk get of its pod's secret (the node
// endpoint's translation of a kubelet's GET) on one replica, and how many
// requests to kube-apiserver reads cause:
//   - rv=0: the cache as it stands, no request;
//   - rv="": one question for kube-apiserver's version of secrets, then,
//     on a type quiet since its last bookmark, a probe (a short watch
//     until kube-apiserver's bookmark, shared by every read waiting);
//   - rv="", N concurrent: N reads at once. questions/op counts
//     nodeproxy_bulk_latest_version_requests_total per read (one in
//     flight per type, one queued); probes/op counts
//     nodeproxy_bulk_progress_probes_total per read.
//
// The secrets are quiet and the other types are not: a configmap is
// written every few milliseconds meanwhile, so kube-apiserver's version
// moves past the secrets cache's as it does in a cluster at work.
//
// go test -run '^$' -bench ConsistentRead -benchtime 20x ./hub/
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
		return testserver.Gathered(b, "nodeproxy_bulk_latest_version_requests_total", map[string]string{"resource": "secrets"})
	}
	probes := func(b *testing.B) float64 {
		return testserver.Gathered(b, "nodeproxy_bulk_progress_probes_total", map[string]string{"resource": "secrets"})
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go writeConfigMaps(ctx, admin, ns)
	for _, rv := range []string{"0", ""} {
		b.Run("rv="+map[string]string{"0": "0", "": `""`}[rv], func(b *testing.B) {
			read(b, rv)
			before, probed := questions(b), probes(b)
			for b.Loop() {
				read(b, rv)
			}
			b.ReportMetric((questions(b)-before)/float64(b.N), "questions/op")
			b.ReportMetric((probes(b)-probed)/float64(b.N), "probes/op")
		})
	}
	// 16 is the most bulk gets one caller may have in flight
	// (--bulk-get-max-in-flight-per-user).
	for _, n := range []int{4, 16} {
		b.Run(fmt.Sprintf("rv=\"\",concurrent=%d", n), func(b *testing.B) {
			before, probed := questions(b), probes(b)
			for b.Loop() {
				var wg sync.WaitGroup
				for range n {
					wg.Go(func() { read(b, "") })
				}
				wg.Wait()
			}
			b.ReportMetric((questions(b)-before)/float64(b.N*n), "questions/op")
			b.ReportMetric((probes(b)-probed)/float64(b.N*n), "probes/op")
		})
	}
}

// writeConfigMaps updates a configmap in ns every 5 ms until ctx ends:
// writes to a type other than the one read.
func writeConfigMaps(ctx context.Context, admin kubernetes.Interface, ns string) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "moves"}, Data: map[string]string{}}
	cm, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		return
	}
	for i := 0; ctx.Err() == nil; i++ {
		if cm.Data == nil { // an empty map does not survive the round trip
			cm.Data = map[string]string{}
		}
		cm.Data["i"] = strconv.Itoa(i)
		if updated, err := admin.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err == nil {
			cm = updated
		}
		time.Sleep(5 * time.Millisecond)
	}
}
