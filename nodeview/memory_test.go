package nodeview

import (
	"fmt"
	"maps"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"testing"
	"time"

	"github.com/nodeproxy/nodeproxy/internal/liveheap"

	nodev1 "k8s.io/api/node/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/cache"
)

// BenchmarkBytesPerView measures the heap an open view costs the hub,
// beyond the cache and the graph that every way of serving the node pays
// for: the view's own state, its entries in Views' indexes, and what the
// encoder keeps of what it sends. Each node is shaped as in
// `nodeproxy-bench nodeview`: 5 pods that each mount 10 secrets and 10
// configmaps of their own (108 objects with its Node and the
// cluster-wide services, runtime classes and CSI drivers). The views'
// sinks drop what they are sent, as a connection's writer does once it
// has written it.
//
// B/view is after the initial state, and initial-µs/view the time the
// views' first step took to build and send it (one goroutine: its CPU).
// B/view-churned is what closing the views gives back (their state and
// indexes: the encoder keeps its entries) after every pod and every
// secret changed once more.
//
//	go test ./nodeview -run '^$' -bench BytesPerView -benchtime 1x
//
// With NODEVIEW_HEAP_PROFILE=<file> (and -memprofilerate 1) it writes the
// heap profiles with the views open to file, after the change to
// file.churned and with the views closed to file.closed: -memprofile
// comes too late, once the replica is gone.
//
// Its views ask for JSON (view=json, an older endpoint) or protobuf
// (view=protobuf, today's endpoint).
func BenchmarkBytesPerView(b *testing.B) {
	for _, enc := range []struct {
		name     string
		protobuf bool
	}{{"json", false}, {"protobuf", true}} {
		b.Run("view="+enc.name, func(b *testing.B) { benchmarkBytesPerView(b, enc.protobuf) })
	}
}

func benchmarkBytesPerView(b *testing.B, protobuf bool) {
	const nodes, pods, perPod = 200, 5, 20
	for b.Loop() {
		r := newReplicaOf(b, cache.Options{LogSize: 1 << 16, EncodedEntries: cache.DefaultEncodedEntries}, nil)
		var k cluster
		var podWrites, secretWrites []write
		put := func(w write) write { r.write(w); return w }
		for i := range 3 {
			put(k.put(servicesGVR, service(fmt.Sprintf("svc-%d", i))))
		}
		put(k.put(rcGVR, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "runc"}, Handler: "runc"}))
		put(k.put(storagev1.SchemeGroupVersion.WithResource("csidrivers"), &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "csi.example.com"}}))
		for n := range nodes {
			nodeName := fmt.Sprintf("node-%d", n)
			put(k.put(nodesGVR, node(nodeName, "a")))
			for p := range pods {
				var uses []string
				for j := range perPod {
					name := fmt.Sprintf("%s-p%d-%d", nodeName, p, j)
					if j%2 == 0 {
						secretWrites = append(secretWrites, put(k.put(secretsGVR, secret(name, "v"))))
						uses = append(uses, "secret/"+name)
					} else {
						put(k.put(cmGVR, configMap(name, "v")))
						uses = append(uses, "configmap/"+name)
					}
				}
				podWrites = append(podWrites, put(k.put(podsGVR, pod(fmt.Sprintf("%s-p%d", nodeName, p), nodeName, uses...))))
			}
		}
		r.views.Step()
		base := liveheap.Bytes()

		sinks := make([]*discardSink, nodes)
		for n := range nodes {
			sinks[n] = &discardSink{protobuf: protobuf}
			v := newView(fmt.Sprintf("node-%d", n), v1alpha1.AllNodeViewTypes, sinks[n], r.graph, r.views)
			r.views.join(v, Position{}, false)
		}
		start := time.Now()
		r.views.Step()
		initial := time.Since(start)
		for _, s := range sinks {
			if s.events != 1+pods*(1+perPod)+5 { // the Node, pods and what they use, cluster-wide
				b.Fatalf("a view sent %d events", s.events)
			}
		}
		b.ReportMetric(float64(int64(liveheap.Bytes())-int64(base))/nodes, "B/view")
		b.ReportMetric(float64(initial.Microseconds())/nodes, "initial-µs/view")
		if f := os.Getenv("NODEVIEW_HEAP_PROFILE"); f != "" {
			writeHeapProfile(b, f)
		}

		// A second version of every pod and secret: what a view keeps of
		// a change, once it is sent, measured as what closing the views
		// gives back.
		for _, w := range append(podWrites, secretWrites...) {
			w.obj.(metav1.Object).SetResourceVersion(k.next())
			r.write(w)
		}
		r.views.Step()
		churned := liveheap.Bytes()
		if f := os.Getenv("NODEVIEW_HEAP_PROFILE"); f != "" {
			writeHeapProfile(b, f+".churned")
		}
		for _, v := range slices.Collect(maps.Keys(r.views.all)) {
			r.views.remove(v)
		}
		r.views.Step()
		if len(r.views.all) != 0 || r.views.reached.len() != 0 {
			b.Fatalf("%d views and %d wanted objects after every view closed", len(r.views.all), r.views.reached.len())
		}
		b.ReportMetric(float64(int64(churned)-int64(liveheap.Bytes()))/nodes, "B/view-churned")
		if f := os.Getenv("NODEVIEW_HEAP_PROFILE"); f != "" {
			writeHeapProfile(b, f+".closed")
		}
		runtime.KeepAlive(r) // the cache and the graph are not the views'
		runtime.KeepAlive(sinks)
	}
}

func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// discardSink counts what it is sent and keeps none of it.
type discardSink struct {
	events int
	// protobuf: the client asked for protobuf (Sink.Protobuf).
	protobuf bool
}

func (s *discardSink) Send(watch.EventType, []byte) bool { s.events++; return true }
func (s *discardSink) Initial(t watch.EventType, _ []byte) bool {
	if t != watch.Bookmark {
		s.events++
	}
	return true
}
func (s *discardSink) OnClose(func())        {}
func (s *discardSink) Close(*metav1.Status)  {}
func (s *discardSink) Done() <-chan struct{} { return nil }
func (s *discardSink) Protobuf() bool        { return s.protobuf }
