package relay

import (
	"bytes"
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/watchmux"
)

// BenchmarkRelay measures what one event costs the endpoint between the
// hub's channel and the client's response: an EndpointSlice to a protobuf
// watch (kube-proxy's), a Secret to a protobuf watch (the kubelet's), the
// same Secret to a JSON watch. One op is one MODIFIED event written;
// docs/benchmarks.md has the figures.
func BenchmarkRelay(b *testing.B) {
	for _, tc := range []struct {
		name      string
		obj       runtime.Object
		mediaType string
	}{
		{"endpointslice/protobuf", endpointSlice(), runtime.ContentTypeProtobuf},
		{"secret/protobuf", secret(), runtime.ContentTypeProtobuf},
		{"secret/json", secret(), runtime.ContentTypeJSON},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ev := hubEvent(b, watch.Modified, tc.obj)
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

// hubEvent is obj as the hub sends it on a channel.
func hubEvent(tb testing.TB, t watch.EventType, obj runtime.Object) watchmux.Event {
	tb.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		tb.Fatal(err)
	}
	return watchmux.Event{Type: t, Object: raw}
}
