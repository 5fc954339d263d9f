package hub_test

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"

	"github.com/nodeproxy/nodeproxy/internal/liveheap"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
	"github.com/nodeproxy/nodeproxy/hub"
	"github.com/nodeproxy/nodeproxy/test/workload"
)

// replicaPodsEnv sizes the replica benchmarks: pods in the cluster, the
// rest of workload.ReplicaOf scaled from them. The defaults are small so
// that a plain `-bench .` stays quick; docs/benchmarks.md ("A replica at
// 1,000,000 pods") has the sizes its figures were taken at.
const replicaPodsEnv = "NODEPROXY_REPLICA_PODS"

// positiveEnv is the number in the environment variable name, fallback
// when it is unset.
func positiveEnv(b *testing.B, name string, fallback int) int {
	v := os.Getenv(name)
	if v == "" {
		return fallback
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

// replicaHeapLimit bounds the benchmark's heap while it feeds a large
// replica: the collector works harder near it rather than let the heap
// double the live set, so that 1,000,000 pods fit a machine of 24 GiB
// shared with others.
const replicaHeapLimit = 10 << 30

// BenchmarkReplicaHeap feeds a replica's cache and authorization graph
// in process, as the hub's reflectors and handlers do (hub.FeedGraph,
// the hub's default cache options), with workload.ReplicaOf the pods in
// NODEPROXY_REPLICA_PODS (default 20,000): each namespace's
// ServiceAccount, then each Deployment's Secret, then its ConfigMap, then
// each pod as two watch events, created bound to its node and running
// (what kube-apiserver stores when it is created, then its kubelet
// writes its status). Each object is decoded from its protobuf first, as
// a reflector decodes it, so that what the cache keeps of it is allocated
// as in the hub. It reports the live heap after a forced collection: the
// process's in all (live-MiB), what the replica added (replica-MiB), and
// what each kind added per object, pods with their graph entries.
//
// log=default runs the change log at the hub's size; log=1 keeps one
// change a type, so the difference between the two is what the log's
// history holds.
//
//	NODEPROXY_REPLICA_PODS=1000000 go test ./hub -run '^$' -bench ReplicaHeap$ -benchtime 1x -timeout 60m
func BenchmarkReplicaHeap(b *testing.B) {
	r := workload.ReplicaOf(positiveEnv(b, replicaPodsEnv, 20000))
	defaults := hub.NewOptions().Cache
	for _, logSize := range []struct {
		name string
		size int
	}{{"default", defaults.LogSize}, {"1", 1}} {
		b.Run("log="+logSize.name, func(b *testing.B) {
			opts := defaults
			opts.LogSize = logSize.size
			for b.Loop() {
				benchmarkReplicaHeap(b, r, opts)
			}
		})
	}
}

var (
	serviceAccountsGVR = corev1.SchemeGroupVersion.WithResource("serviceaccounts")
	secretsGVR         = corev1.SchemeGroupVersion.WithResource("secrets")
	configMapsGVR      = corev1.SchemeGroupVersion.WithResource("configmaps")
	podsGVR            = corev1.SchemeGroupVersion.WithResource("pods")
)

func benchmarkReplicaHeap(b *testing.B, r workload.Replica, opts cache.Options) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(replicaHeapLimit))
	c, err := cache.NewDetached(opts)
	if err != nil {
		b.Fatal(err)
	}
	if err := hub.FeedGraph(c, graph.New()); err != nil {
		b.Fatal(err)
	}
	// Every store listed empty, as the hub's are on a new cluster, so
	// that what follows arrives as watch events.
	for _, gvr := range cache.Watched() {
		if err := c.Store(gvr).Replace(nil, "1"); err != nil {
			b.Fatal(err)
		}
	}
	rv := 1
	write := func(gvr schema.GroupVersionResource, added bool, obj interface{ SetResourceVersion(string) }) {
		rv++
		obj.SetResourceVersion(strconv.Itoa(rv))
		s := c.Store(gvr)
		if added {
			err = s.Add(obj)
		} else {
			err = s.Update(obj)
		}
		if err != nil {
			b.Fatalf("%s at resourceVersion %d: %v", gvr.Resource, rv, err)
		}
	}

	base := liveheap.Bytes()
	heap := base
	perObject := func(kind string, n int) {
		now := liveheap.Bytes()
		b.ReportMetric(float64(int64(now)-int64(heap))/float64(n), "B/"+kind)
		heap = now
	}
	for n := range r.Namespaces() {
		write(serviceAccountsGVR, true, viaProtobuf(b, r.ServiceAccount(n)))
	}
	perObject("serviceaccount", r.Namespaces())
	for d := range r.Deployments {
		write(secretsGVR, true, viaProtobuf(b, r.Secret(d)))
	}
	perObject("secret", r.Deployments)
	for d := range r.Deployments {
		write(configMapsGVR, true, viaProtobuf(b, r.ConfigMap(d)))
	}
	perObject("configmap", r.Deployments)
	for i := range r.Pods {
		write(podsGVR, true, viaProtobuf(b, r.CreatedPod(i)))
		write(podsGVR, false, viaProtobuf(b, r.RunningPod(i)))
	}
	perObject("pod", r.Pods)
	runtime.KeepAlive(c)

	b.ReportMetric(float64(heap-base)/(1<<20), "replica-MiB")
	b.ReportMetric(float64(heap)/(1<<20), "live-MiB")
	b.ReportMetric(float64(r.Pods), "pods")
	b.ReportMetric(float64(r.Nodes()), "nodes")
}

// BenchmarkReplicaGraphHeap is BenchmarkReplicaHeap's pods fed to the
// authorization graph alone, as the store's handler feeds it (an add,
// then an update), without the cache: the graph's share of a pod's cost,
// with the entries of the Secrets, ConfigMaps and nodes its pods reach
// and the sets of the nodes that reach each.
//
//	NODEPROXY_REPLICA_PODS=1000000 go test ./hub -run '^$' -bench ReplicaGraphHeap -benchtime 1x -timeout 60m
func BenchmarkReplicaGraphHeap(b *testing.B) {
	r := workload.ReplicaOf(positiveEnv(b, replicaPodsEnv, 20000))
	for b.Loop() {
		g := graph.New()
		h := g.PodHandler()
		base := liveheap.Bytes()
		for i := range r.Pods {
			created := viaProtobuf(b, r.CreatedPod(i))
			h.OnAdd(created, false)
			h.OnUpdate(created, viaProtobuf(b, r.RunningPod(i)))
		}
		heap := liveheap.Bytes()
		runtime.KeepAlive(g)
		b.ReportMetric(float64(int64(heap)-int64(base))/float64(r.Pods), "graph-B/pod")
		b.ReportMetric(float64(int64(heap)-int64(base))/(1<<20), "graph-MiB")
	}
}

// protobufObject is a typed API object with its generated protobuf
// codec.
type protobufObject[T any] interface {
	*T
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
	SetResourceVersion(string)
}

// viaProtobuf is obj encoded as kube-apiserver sends it and decoded as a
// reflector decodes it: a new object whose strings, maps and slices are
// its own.
func viaProtobuf[T any, P protobufObject[T]](b *testing.B, obj P) P {
	raw, err := obj.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	out := P(new(T))
	if err := out.Unmarshal(raw); err != nil {
		b.Fatal(fmt.Errorf("decode %T: %w", obj, err))
	}
	return out
}
