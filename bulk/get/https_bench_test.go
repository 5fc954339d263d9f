package get_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/bulke2e"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// BenchmarkHundredGETsVersusOneBulkGet fetches one node's 100 objects (50
// secrets and 50 configmaps of 1 KiB) four ways in each iteration, over
// HTTPS on loopback, with kube-apiserver, etcd and nodeproxy on the same
// two cores:
//
//   - kube-apiserver-GETs: 100 GETs from kube-apiserver, one after
//     another, on one HTTP/2 connection (quorum reads from etcd, the
//     default for a GET);
//   - kube-apiserver-GETs-rv0: the same with resourceVersion=0, served
//     from kube-apiserver's watch cache;
//   - bulk-direct: one bulk get from nodeproxy as node-a over mTLS (how a
//     node-local endpoint reaches it);
//   - bulk-aggregated: the same bulk get through kube-apiserver's
//     aggregator.
//
// It reports the median milliseconds of each and the ratio of the first
// to the third.
//
//	go test ./bulk/get -run '^$' -bench HundredGETs -benchtime 100x
func BenchmarkHundredGETsVersusOneBulkGet(b *testing.B) {
	srv := bulke2e.StartNodeproxy(b, cp, npPort)
	ctx := context.Background()
	ns := bulke2e.Namespace("bulk-bench")
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		b.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	value := strings.Repeat("x", 1024)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kubelet"},
		Spec: corev1.PodSpec{NodeName: "node-a",
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	var ops []string
	for i := range 50 {
		name := fmt.Sprintf("obj-%d", i)
		if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
			Data: map[string][]byte{"data": []byte(value)}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
			Data: map[string]string{"data": value}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		pod.Spec.Volumes = append(pod.Spec.Volumes,
			corev1.Volume{Name: "s" + name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name}}},
			corev1.Volume{Name: "c" + name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: name}}}})
		ops = append(ops, bulke2e.Op("secrets", ns, "metadata.name="+name), bulke2e.Op("configmaps", ns, "metadata.name="+name))
	}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	nodeA, err := cp.NodeConfig("node-a")
	if err != nil {
		b.Fatal(err)
	}
	body := bulke2e.Request(ops...)
	bulkDirect, bulkAggregated := bulke2e.Direct(b, srv, nodeA), bulke2e.ThroughKubeAPIServer(b, nodeA)
	bulkGet := func(e bulke2e.Endpoint) {
		code, out, status := e.Post(b, body)
		if code != http.StatusCreated || len(out.Status.Results) != 100 {
			b.Fatalf("%s: %d %v", e.Name, code, status)
		}
	}
	// Wait for nodeproxy to have the pod: until then node-a is refused.
	testserver.Eventually(b, 30*time.Second, "nodeproxy lets node-a read its pod's objects", func(context.Context) error {
		if code, _, status := bulkDirect.Post(b, body); code != http.StatusCreated {
			return fmt.Errorf("%d: %v", code, status)
		}
		return nil
	})
	gets := func(rv string) {
		for i := range 50 {
			name := fmt.Sprintf("obj-%d", i)
			if _, err := admin.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{ResourceVersion: rv}); err != nil {
				b.Fatal(err)
			}
			if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{ResourceVersion: rv}); err != nil {
				b.Fatal(err)
			}
		}
	}
	gets("")
	bulkGet(bulkAggregated)

	var quorum, rv0, bulk, aggregated []time.Duration
	timed := func(into *[]time.Duration, f func()) {
		start := time.Now()
		f()
		*into = append(*into, time.Since(start))
	}
	for b.Loop() {
		timed(&quorum, func() { gets("") })
		timed(&rv0, func() { gets("0") })
		timed(&bulk, func() { bulkGet(bulkDirect) })
		timed(&aggregated, func() { bulkGet(bulkAggregated) })
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	mq, mb := median(quorum), median(bulk)
	b.ReportMetric(mq, "kube-apiserver-GETs-ms")
	b.ReportMetric(median(rv0), "kube-apiserver-GETs-rv0-ms")
	b.ReportMetric(mb, "bulk-direct-ms")
	b.ReportMetric(median(aggregated), "bulk-aggregated-ms")
	b.ReportMetric(mq/mb, "GETs/bulk-ratio")
}
