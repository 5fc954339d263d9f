package watch

import (
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiwatch "k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/bulk/internal/bulktest"
	"github.com/nodeproxy/nodeproxy/cache"
)

// discard is a sink that takes every event and keeps none.
type discard struct{ sent int }

func (d *discard) Send(apiwatch.EventType, []byte) bool    { d.sent++; return true }
func (d *discard) Initial(apiwatch.EventType, []byte) bool { return true }
func (d *discard) OnClose(func())                          {}
func (d *discard) Close(*metav1.Status)                    {}
func (d *discard) Done() <-chan struct{}                   { return nil }
func (d *discard) Protobuf() bool                          { return false }

// BenchmarkDispatchSharedSelector measures what one service update costs
// the dispatcher with 1,000 channels open on services: kube-proxy's
// selector on every channel (one per node: shared), or each channel in a
// namespace of its own (distinct). One op is one event fanned out to every
// channel; docs/benchmarks.md has the figures.
func BenchmarkDispatchSharedSelector(b *testing.B) {
	const channels = 1000
	for _, shape := range []string{"shared", "distinct"} {
		b.Run(shape+"/channels="+strconv.Itoa(channels), func(b *testing.B) {
			f := bulktest.New(b, 64)
			store := f.Cache.Store(corev1.SchemeGroupVersion.WithResource("services"))
			d := newDispatcher(store, f.Catalog.Encoder(), time.Hour)
			close(d.ready)
			sinks := make([]*discard, channels)
			for i := range sinks {
				ns := ""
				if shape == "distinct" {
					ns = "ns-" + strconv.Itoa(i)
				}
				sel := bulktest.GetOp("services", ns, metav1.ListOptions{
					LabelSelector: "!service.kubernetes.io/service-proxy-name", FieldSelector: "spec.clusterIP!=None",
				})
				q, errs, err := f.Catalog.ParseWatch(&sel)
				if err != nil || len(errs) > 0 {
					b.Fatal(err, errs)
				}
				sinks[i] = &discard{}
				s := &stream{q: q, sink: sinks[i], graph: f.Graph, encoder: f.Catalog.Encoder()}
				if _, err := d.register(s, 0, false); err != nil {
					b.Fatal(err)
				}
			}
			svc := func(rv uint64) *cache.Object {
				o, err := cache.NewObject(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns-0", Name: "web", ResourceVersion: strconv.FormatUint(rv, 10),
					Labels: map[string]string{"app": "web"}},
					Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.1", Type: corev1.ServiceTypeClusterIP}})
				if err != nil {
					b.Fatal(err)
				}
				return o
			}
			prev := svc(1)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				rv := uint64(i) + 2
				o := svc(rv)
				d.mu.Lock()
				d.fanOutLocked(&cache.Event{Type: apiwatch.Modified, Object: o, Prev: prev, RV: rv, PrevRV: rv - 1})
				d.mu.Unlock()
				prev = o
			}
			b.StopTimer()
			want := b.N
			if shape == "distinct" {
				if sinks[0].sent != want || sinks[1].sent != 0 {
					b.Fatalf("ns-0's channel got %d events, ns-1's %d; want %d and 0", sinks[0].sent, sinks[1].sent, want)
				}
				return
			}
			for i, s := range sinks {
				if s.sent != want {
					b.Fatalf("channel %d got %d events, want %d", i, s.sent, want)
				}
			}
		})
	}
}
