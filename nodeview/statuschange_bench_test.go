package nodeview

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	testworkload "github.com/nodeproxy/nodeproxy/test/workload"
)

// BenchmarkPodStatusChange measures the hub's CPU for a kubelet's status
// write of a Deployment's running pod (workload.DeploymentPod, which the
// cache keeps as protobuf bytes) to reach its node's view: the view's
// step that takes the change in, reads what the pod uses, and sends it
// with the bookmark that closes its batch. Its view asks for JSON (an
// older endpoint) or protobuf (today's). The cache's own ingest of the
// write is not timed: every way of serving the node pays it.
//
//	go test ./nodeview -run '^$' -bench PodStatusChange -count 6
func BenchmarkPodStatusChange(b *testing.B) {
	for _, enc := range []struct {
		name     string
		protobuf bool
	}{{"json", false}, {"protobuf", true}} {
		b.Run("view="+enc.name, func(b *testing.B) {
			r := newReplica(b, 1<<12)
			var k cluster
			meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: "shop", Name: name} }
			for _, w := range []write{
				k.put(secretsGVR, &corev1.Secret{ObjectMeta: meta("web-credentials"), Data: map[string][]byte{"password": []byte("s3cret")}}),
				k.put(cmGVR, &corev1.ConfigMap{ObjectMeta: meta("web-config"), Data: map[string]string{"app.yaml": "level: info"}}),
				k.put(cmGVR, &corev1.ConfigMap{ObjectMeta: meta("kube-root-ca.crt"), Data: map[string]string{"ca.crt": "-----BEGIN CERTIFICATE-----"}}),
				k.put(saGVR, &corev1.ServiceAccount{ObjectMeta: meta("web")}),
				k.put(nodesGVR, node("node-1", "a")),
			} {
				r.write(w)
			}
			p := testworkload.DeploymentPod("shop", "web", 1, "node-1", testworkload.PodRunning)
			r.write(k.put(podsGVR, p))
			sink := &discardSink{protobuf: enc.protobuf}
			r.views.join(newView("node-1", v1alpha1.AllNodeViewTypes, sink, r.graph, r.views), Position{}, false)
			r.views.Step()
			sent := sink.events
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				p = p.DeepCopy()
				p.Status.ContainerStatuses[0].RestartCount = int32(i % 2)
				r.write(k.put(podsGVR, p))
				b.StartTimer()
				r.views.Step()
			}
			b.StopTimer()
			if got := sink.events - sent; got != 2*b.N { // MODIFIED, and the bookmark closing its batch
				b.Fatalf("%d status writes sent %d events", b.N, got)
			}
		})
	}
}
