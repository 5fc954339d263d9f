package hub_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// quantiles reports p50 and max of took, in milliseconds.
func quantiles(b *testing.B, took []time.Duration) {
	b.Helper()
	slices.Sort(took)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(took[int(math.Ceil(0.5*float64(len(took))))-1]), "p50-ms")
	b.ReportMetric(ms(took[len(took)-1]), "max-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkEventLagBetweenReplicas: two hub replicas hold a channel on
// one secret; each iteration updates it and times how far apart the two
// channels receive the change: how long a version one replica handed out
// takes to reach the other (what bulk.StoreLagAllowance waits for):
//
//	go test ./hub -run '^$' -bench EventLagBetweenReplicas -benchtime 200x
func BenchmarkEventLagBetweenReplicas(b *testing.B) {
	const ns = "resume-bench-lag"
	ctx := context.Background()
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		b.Fatal(err)
	}
	testserver.InstallRBAC(b, cp)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	writeSecret(b, admin, ns, "s", "0")
	var chans []*watchmux.Channel
	for range 2 {
		ch, err := dialAsAdmin(b, startReplica(b)).Watch(ctx, secretsIn(ns, "metadata.name=s", ""))
		if err != nil {
			b.Fatal(err)
		}
		nextSeen(b, ch) // ADDED
		chans = append(chans, ch)
	}
	var lag []time.Duration
	for i := 0; b.Loop(); i++ {
		writeSecret(b, admin, ns, "s", strconv.Itoa(i+1))
		arrived := make(chan time.Time, 2)
		for _, ch := range chans {
			go func() {
				if e := nextSeen(b, ch); e.typ != watch.Modified {
					b.Errorf("%+v", e)
				}
				arrived <- time.Now()
			}()
		}
		t1, t2 := <-arrived, <-arrived
		lag = append(lag, t2.Sub(t1))
	}
	quantiles(b, lag)
}

// BenchmarkResumeAheadOfTheCache: each iteration resumes a channel on a
// replica from a version of secrets that its quiet secrets cache has not
// reached (configmaps written since its last secret change or bookmark:
// as a client coming from a replica that had a later bookmark), and
// times until the channel is open. Beside it, resumes from a version the
// cache holds. The difference is bulk.StoreLagAllowance plus one question to
// kube-apiserver:
//
//	go test ./hub -run '^$' -bench ResumeAheadOfTheCache -benchtime 50x
func BenchmarkResumeAheadOfTheCache(b *testing.B) {
	const ns = "resume-bench-ahead"
	ctx := context.Background()
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		b.Fatal(err)
	}
	testserver.InstallRBAC(b, cp)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	cached := writeSecret(b, admin, ns, "s", "0")
	srv := startReplica(b)
	c := dialAsAdmin(b, srv)
	for _, bc := range []struct {
		name string
		from func() uint64
	}{
		{"from=cached", func() uint64 { return cached }},
		{"from=ahead", func() uint64 { return quietBelow(b, srv, admin, ns) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var took []time.Duration
			for b.Loop() {
				from := strconv.FormatUint(bc.from(), 10)
				start := time.Now()
				ch, err := c.Watch(ctx, secretsIn(ns, "metadata.name=s", from))
				if err != nil {
					b.Fatalf("resume from %s: %v", from, err)
				}
				took = append(took, time.Since(start))
				if err := c.CloseWatch(ctx, ch); err != nil {
					b.Fatal(err)
				}
			}
			quantiles(b, took)
			fmt.Printf("%s: %d resumes\n", bc.name, len(took))
		})
	}
}
