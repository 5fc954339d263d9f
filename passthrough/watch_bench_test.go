package passthrough_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/watchmux"
)

// BenchmarkUncachedChannelLatency: what one channel on an uncached type
// adds to a watch. Each iteration changes the Deployment web once (an
// annotation, as admin) and times, from just before the write, the
// event's arrival on two watches open side by side as alice: a client-go
// watch on kube-apiserver, and a bulk watch channel on the hub (directly
// over mTLS), which is itself a watch on kube-apiserver relayed. Reports
// the median and p99 of each, and of the difference per event.
//
//	go test -run '^$' -bench UncachedChannelLatency -benchtime 300x ./passthrough/
func BenchmarkUncachedChannelLatency(b *testing.B) {
	srv := startHub(b)
	alice, err := cp.UserConfig("alice")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	d, err := admin.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	opts := metav1.ListOptions{ResourceVersion: d.ResourceVersion, FieldSelector: "metadata.name=web"}

	direct, err := kubernetes.NewForConfigOrDie(alice).AppsV1().Deployments(ns).Watch(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Stop()
	hubCfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CertData: alice.CertData, KeyData: alice.KeyData, CAFile: cp.ServingCA.CertPath}}
	mux, err := watchmux.Dial(ctx, hubCfg)
	if err != nil {
		b.Fatal(err)
	}
	defer mux.Close()
	ch, err := mux.Watch(ctx, watchOn("apps", "v1", "deployments", ns, opts))
	if err != nil {
		b.Fatal(err)
	}

	// Arrival times by the annotation's value, from each watch.
	type arrival struct {
		seq string
		at  time.Time
	}
	fromDirect, fromChannel := make(chan arrival, 16), make(chan arrival, 16)
	go func() {
		for ev := range direct.ResultChan() {
			if dep, ok := ev.Object.(*appsv1.Deployment); ok && ev.Type == watch.Modified {
				fromDirect <- arrival{dep.Annotations["bench"], time.Now()}
			}
		}
	}()
	go func() {
		for ev := range ch.Events {
			var o struct{ Metadata metav1.ObjectMeta }
			if ev.Type == watch.Modified && json.Unmarshal(ev.Object, &o) == nil {
				fromChannel <- arrival{o.Metadata.Annotations["bench"], time.Now()}
			}
		}
	}()
	wait := func(from chan arrival, seq string) time.Time {
		for {
			select {
			case a := <-from:
				if a.seq == seq {
					return a.at
				}
			case <-time.After(30 * time.Second):
				b.Fatalf("event %s: not seen in 30 s", seq)
			}
		}
	}

	var directLat, channelLat, added []time.Duration
	b.ResetTimer()
	for i := range b.N {
		seq := strconv.Itoa(i) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		start := time.Now()
		if _, err := admin.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"bench":"`+seq+`"}}}`), metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		dt, ct := wait(fromDirect, seq), wait(fromChannel, seq)
		directLat = append(directLat, dt.Sub(start))
		channelLat = append(channelLat, ct.Sub(start))
		added = append(added, ct.Sub(dt))
	}
	b.StopTimer()
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"direct", directLat}, {"channel", channelLat}, {"added", added}} {
		slices.Sort(m.d)
		b.ReportMetric(ms(m.d[len(m.d)/2]), m.name+"-p50-ms")
		b.ReportMetric(ms(m.d[(len(m.d)*99)/100]), m.name+"-p99-ms")
	}
	b.ReportMetric(0, "ns/op")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
