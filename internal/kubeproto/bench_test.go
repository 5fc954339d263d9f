package kubeproto

import (
	"bytes"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/nodeproxy/nodeproxy/test/workload"
)

// BenchmarkNext measures the walks the callers make of a Deployment's
// running pod as kube-apiserver's protobuf serializer writes it: its
// envelope (every caller, at every event or write), its top-level
// fields (the cache's cuts), its metadata's fields (the cache's keys,
// the endpoint's and the bulk watch client's heads), and one field of
// the metadata (the bulk watch client's resourceVersion).
//
//	go test ./internal/kubeproto -run '^$' -bench Next -benchmem -count 5
func BenchmarkNext(b *testing.B) {
	pod := workload.DeploymentPod("shop", "web", 1, "node-1", workload.PodRunning)
	pod.APIVersion, pod.Kind, pod.ResourceVersion = "v1", "Pod", "7"
	var buf bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(pod, &buf); err != nil {
		b.Fatal(err)
	}
	whole := buf.Bytes()
	_, raw, err := Envelope(whole)
	if err != nil {
		b.Fatal(err)
	}
	object := raw.Value(whole)
	meta, err := Bytes(object, ObjectMetadata)
	if err != nil || meta == nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		walk func() error
	}{
		{"envelope", func() error { _, _, err := Envelope(whole); return err }},
		{"object-fields", func() error { _, err := Fields(object); return err }},
		{"metadata-fields", func() error { _, err := Fields(meta); return err }},
		{"metadata-rv", func() error { _, err := Bytes(meta, MetaResourceVersion); return err }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := tc.walk(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
