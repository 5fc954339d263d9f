package get

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/bulk"
	"github.com/nodeproxy/nodeproxy/bulk/internal/bulktest"
)

// Figures in docs/benchmarks.md ("A kubelet's bulk get"):
//
//	go test ./bulk/get -run '^$' -bench BulkGet -benchtime 2000x

// kubeletShape is one node's view: pods referencing 50 secrets and 50
// configmaps of 1 KiB, among a cluster of 20,000 other secrets in 200
// namespaces, so lookups walk trees of a realistic depth.
func kubeletShape(b *testing.B) (*fixture, []v1alpha1.GetOperation) {
	f := newFixture(b, 4096)
	value := []byte(strings.Repeat("x", 1024))
	for i := range 20000 {
		s := bulktest.Secret(fmt.Sprintf("ns%d", i%200), fmt.Sprintf("other-%d", i))
		s.Data = map[string][]byte{"data": value}
		f.Add(b, s)
	}
	var ops []v1alpha1.GetOperation
	for i := range 50 {
		ns := fmt.Sprintf("ns%d", i%200)
		s := bulktest.Secret(ns, fmt.Sprintf("mine-%d", i))
		s.Data = map[string][]byte{"data": value}
		f.Add(b, s)
		cm := &corev1.ConfigMap{ObjectMeta: bulktest.Meta(ns, fmt.Sprintf("mine-%d", i)), Data: map[string]string{"data": string(value)}}
		f.Add(b, cm)
		p := bulktest.Pod(ns, fmt.Sprintf("p%d", i), "node-a", s.Name)
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "cm", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}})
		f.Add(b, p)
		ops = append(ops, bulktest.FieldOp("secrets", ns, "metadata.name="+s.Name), bulktest.FieldOp("configmaps", ns, "metadata.name="+cm.Name))
	}
	return f, ops
}

// BenchmarkBulkGet100Named is a kubelet's bulk get of its 100 objects,
// served in-process: validation, graph authorization of every operation,
// lookups and encoding (warm: each version is encoded once). Reports the
// median and p99 of one request.
func BenchmarkBulkGet100Named(b *testing.B) {
	f, ops := kubeletShape(b)
	spec := &v1alpha1.BulkGetOperationSpec{Operations: ops}
	ctx := context.Background()
	if _, err := f.getter.Get(ctx, bulktest.NodeA, spec); err != nil {
		b.Fatal(err)
	}
	var took []time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		out, err := f.getter.Get(ctx, bulktest.NodeA, spec)
		took = append(took, time.Since(start))
		if err != nil || len(out) != 100 {
			b.Fatal(err)
		}
	}
	reportPercentiles(b, took)
}

// BenchmarkBulkGet100NamedFromCache is BenchmarkBulkGet100Named at
// resourceVersion "0" (any version the cache has): no wait for
// kube-apiserver's current version (a consistent read's, which spaces
// one client's questions 200 ms apart, bulk.LatestChecker), so ns/op is
// the request's CPU on one goroutine: validation, authorization, lookups
// and the answer's encoding.
func BenchmarkBulkGet100NamedFromCache(b *testing.B) {
	f, ops := kubeletShape(b)
	for i := range ops {
		ops[i].Options.ResourceVersion = "0"
	}
	spec := &v1alpha1.BulkGetOperationSpec{Operations: ops}
	ctx := context.Background()
	if _, err := f.getter.Get(ctx, bulktest.NodeA, spec); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		out, err := f.getter.Get(ctx, bulktest.NodeA, spec)
		if err != nil || len(out) != 100 {
			b.Fatal(err)
		}
	}
}

// BenchmarkBulkGetReachable is the same node asking for everything it
// reaches in two operations (secrets, configmaps) instead of naming 100
// objects: one pass over each type's store with a graph lookup per object.
func BenchmarkBulkGetReachable(b *testing.B) {
	f, _ := kubeletShape(b)
	spec := &v1alpha1.BulkGetOperationSpec{Operations: []v1alpha1.GetOperation{
		bulktest.FieldOp("secrets", "", bulk.ReachableFromField+"=node-a"), bulktest.FieldOp("configmaps", "", bulk.ReachableFromField+"=node-a"),
	}}
	ctx := context.Background()
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := f.getter.Get(ctx, bulktest.NodeA, spec); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	reportPercentiles(b, took)
}

func reportPercentiles(b *testing.B, took []time.Duration) {
	b.Helper()
	if len(took) == 0 {
		return
	}
	slices.Sort(took)
	at := func(p float64) float64 { return float64(took[int(p*float64(len(took)-1))].Microseconds()) }
	b.ReportMetric(at(0.5), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}
