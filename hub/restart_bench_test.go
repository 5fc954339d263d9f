package hub_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodeproxy/nodeproxy/hub"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// clientGoBackoff is client-go's default reflector backoff
// (k8s.io/client-go/tools/cache/reflector.go: 0.8 s doubling to 30 s,
// jitter 1.0), what the cache used before ReflectorBackoff.
var clientGoBackoff = wait.Backoff{Duration: 800 * time.Millisecond, Cap: 30 * time.Second, Steps: int(math.Ceil(30 / 0.8)), Factor: 2, Jitter: 1}

// BenchmarkUpdateToNodeAfterKubeAPIServerRestart: each iteration kills
// kube-apiserver under a running hub, starts it again at once (about 3 s
// down on the harness), writes a Secret update the moment kube-apiserver
// is ready, and times until a node reading from the hub (a bulk get, as
// the node endpoint reads) sees it. The restarts follow each other as in
// issue 14's runs (three kills in a few minutes), so a backoff grown by
// one restart is still grown at the next. Once with client-go's backoff,
// once with ReflectorBackoff; -benchtime Nx is N restarts each:
//
//	go test ./hub -run '^$' -bench UpdateToNodeAfterKubeAPIServerRestart -benchtime 8x -timeout 30m
func BenchmarkUpdateToNodeAfterKubeAPIServerRestart(b *testing.B) {
	for _, bc := range []struct {
		name    string
		backoff *wait.Backoff
	}{
		{"backoff=client-go", &clientGoBackoff},
		{"backoff=nodeproxy", nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			testserver.InstallRBAC(b, cp)
			srv := testserver.Start(b, cp, testserver.Options{Configure: func(o *hub.Options) { o.Cache.Backoff = bc.backoff }})
			srv.WaitReady(b, 90*time.Second)
			secret := nodeReadsSecret(b, srv, "restart-bench")
			secret.waitFor(b, "0", 30*time.Second)
			var took []time.Duration
			// b.Loop runs this function once, so the hub above starts
			// once for all the restarts.
			for i := 0; b.Loop(); i++ {
				killed := time.Now()
				cp.APIServer().Kill()
				if err := cp.RestartAPIServer(ctx); err != nil {
					b.Fatal(err)
				}
				ready := time.Now()
				b.Logf("restart %d: kube-apiserver ready %s after the kill", i, ready.Sub(killed).Round(time.Millisecond))
				v := bc.name + "-" + strconv.Itoa(i)
				secret.update(b, v)
				if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
					got, err := secret.read()
					return err == nil && got == v, nil
				}); err != nil {
					b.Fatalf("restart %d: the update did not reach the node: %v", i, err)
				}
				took = append(took, time.Since(ready))
				b.Logf("restart %d: update reached the node %s after kube-apiserver was ready", i, took[i].Round(time.Millisecond))
			}
			slices.Sort(took)
			at := func(q float64) time.Duration { return took[int(math.Ceil(q*float64(len(took))))-1] }
			b.ReportMetric(at(0.5).Seconds(), "p50-s")
			b.ReportMetric(at(0.99).Seconds(), "p99-s")
			b.ReportMetric(took[len(took)-1].Seconds(), "max-s")
			b.ReportMetric(0, "ns/op")
			fmt.Printf("%s: update-to-node after kube-apiserver ready, %d restarts: %v\n", bc.name, len(took), took)
		})
	}
}
