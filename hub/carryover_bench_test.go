package hub_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/hub"
	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// BenchmarkChannelExpiriesPerKubeAPIServerRestart: 10 nodes, each with a
// pod that mounts a secret of its own, hold one bulk watch connection to
// the hub with two channels, on their secret (metadata.name=) and on
// their pods (spec.nodeName=), as the node endpoint holds the kubelet's.
// Each iteration kills kube-apiserver, starts it again, waits until a
// node reads an update from the hub, and counts the ERROR 410s the
// channels got (each one a relist for its node, which then resubscribes)
// and the hub's relists. Once with the change log restarted on every
// relist (before), once carried on:
//
//	go test ./hub -run '^$' -bench ChannelExpiriesPerKubeAPIServerRestart -benchtime 6x -timeout 30m
func BenchmarkChannelExpiriesPerKubeAPIServerRestart(b *testing.B) {
	const nodes = 10
	for _, bc := range []struct {
		name    string
		restart bool
	}{
		{"relist=restart-log", true},
		{"relist=carry-over", false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			testserver.InstallRBAC(b, cp)
			srv := testserver.Start(b, cp, testserver.Options{Configure: func(o *hub.Options) { o.Cache.RestartLogOnRelist = bc.restart }})
			srv.WaitReady(b, 90*time.Second)
			ns := "expiry-" + map[bool]string{true: "before", false: "after"}[bc.restart]
			marker := nodeReadsSecret(b, srv, ns)
			admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
			var expired atomic.Int64
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			for i := range nodes {
				node := "node-" + ns + "-" + strconv.Itoa(i)
				name := "s" + strconv.Itoa(i)
				if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					b.Fatal(err)
				}
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: "p" + strconv.Itoa(i)},
					Spec: corev1.PodSpec{
						NodeName:   node,
						Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
						Volumes:    []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name}}}},
					},
				}
				if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					b.Fatal(err)
				}
				c := dialAsNode(b, srv, node)
				for _, op := range []v1alpha1.GetOperation{
					{Resource: metav1.GroupVersionResource{Version: "v1", Resource: "secrets"}, Namespace: ns, Options: metav1.ListOptions{FieldSelector: "metadata.name=" + name}},
					{Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: ns, Options: metav1.ListOptions{FieldSelector: "spec.nodeName=" + node}},
				} {
					subscribe := func() (ch *watchmux.Channel, err error) {
						err = retry(ctx, func() error { ch, err = c.Watch(ctx, op); return err })
						return ch, err
					}
					ch, err := subscribe()
					if err != nil {
						b.Fatal(err)
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							var ev watchmux.Event
							var ok bool
							select {
							case <-ctx.Done():
								return
							case ev, ok = <-ch.Events:
							}
							if ok && ev.Type != watch.Error {
								continue
							}
							if ok {
								expired.Add(1)
							}
							// A node relists and resubscribes.
							if ch, err = subscribe(); err != nil {
								return
							}
						}
					}()
				}
			}
			relists := func() float64 {
				return testserver.Gathered(b, "nodeproxy_cache_relists_total", map[string]string{"resource": "secrets"}) + testserver.Gathered(b, "nodeproxy_cache_relists_total", map[string]string{"resource": "pods"})
			}
			startRelists, startExpired := relists(), expired.Load()
			for i := 0; b.Loop(); i++ {
				cp.APIServer().Kill()
				if err := cp.RestartAPIServer(ctx); err != nil {
					b.Fatal(err)
				}
				v := "r" + strconv.Itoa(i)
				marker.update(b, v)
				marker.waitFor(b, v, 2*time.Minute)
				time.Sleep(time.Second) // let the 410s of this restart arrive
			}
			n := float64(b.N)
			b.ReportMetric(float64(expired.Load()-startExpired)/n, "410s/restart")
			b.ReportMetric((relists()-startRelists)/n, "hub-relists/restart")
			b.ReportMetric(0, "ns/op")
			fmt.Printf("%s: %d restarts, %d channels: %d channel 410s (each a node relist), %.0f hub relists of secrets and pods\n",
				bc.name, b.N, 2*nodes, expired.Load()-startExpired, relists()-startRelists)
		})
	}
}

// retry retries f for up to 30 s: a Watch right after a restart can be
// refused while the hub catches up.
func retry(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
