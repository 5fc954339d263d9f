package relay

import (
	"bytes"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// BenchmarkRelay measures what one event costs the endpoint between the
// hub's channel and the client's response: an EndpointSlice to a protobuf
// watch (kube-proxy's), a Secret to a protobuf watch (the kubelet's), the
// same Secret to a JSON watch, each as a hub sends it that takes the
// channel's encoding (the object's bytes, passed through), and the
// protobuf ones also as an older hub sends them (JSON, decoded and
// encoded again). One op is one MODIFIED event written; docs/benchmarks.md
// has the figures.
func BenchmarkRelay(b *testing.B) {
	for _, tc := range []struct {
		name      string
		obj       runtime.Object
		mediaType string
		asJSON    bool // the hub sends JSON whatever the channel asked
	}{
		{"endpointslice/protobuf", endpointSlice(), runtime.ContentTypeProtobuf, false},
		{"secret/protobuf", secret(), runtime.ContentTypeProtobuf, false},
		{"secret/json", secret(), runtime.ContentTypeJSON, true},
		{"endpointslice/protobuf-older-hub", endpointSlice(), runtime.ContentTypeProtobuf, true},
		{"secret/protobuf-older-hub", secret(), runtime.ContentTypeProtobuf, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			mediaType := tc.mediaType
			if tc.asJSON {
				mediaType = runtime.ContentTypeJSON
			}
			ev := hubEvent(b, watch.Modified, tc.obj, mediaType)
			var out bytes.Buffer
			w := NewWriter(&out, streamInfo(b, tc.mediaType), testCodecs, gvOf(tc.obj))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				out.Reset()
				if _, err := w.Write(ev); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if out.Len() == 0 {
				b.Fatal("nothing written")
			}
		})
	}
}
