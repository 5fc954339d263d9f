package watchmux

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/gorilla/websocket"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/nodeproxy/nodeproxy/test/workload"
)

// BenchmarkClientEvent measures what one event message costs a session's
// consumer side, the node endpoint's share before it writes the event
// out (endpoint/relay's BenchmarkRelay): the client reads the message
// into an Event, and the session takes in its resourceVersion. An
// EndpointSlice of 10 endpoints, as a JSON text message and as a binary
// one with a protobuf object. One op is one message; docs/benchmarks.md
// has the figures.
func BenchmarkClientEvent(b *testing.B) {
	slice := workload.ServiceSlice("shop", "web", 10)
	jsonObject, err := json.Marshal(slice)
	if err != nil {
		b.Fatal(err)
	}
	var proto bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(slice, &proto); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		kind int
		data []byte
	}{
		{"endpointslice/json", websocket.TextMessage, append(append([]byte(`{"channel":1,"type":"MODIFIED","object":`), jsonObject...), '}')},
		{"endpointslice/protobuf", websocket.BinaryMessage, append([]byte("{\"channel\":1,\"type\":\"MODIFIED\"}\n"), proto.Bytes()...)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			events := make(chan Event, 1)
			c := &Client{channels: map[int64]*Channel{1: {ID: 1, Events: events, events: events}}}
			sc := &SessionChannel{}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := c.handle(tc.kind, tc.data); err != nil {
					b.Fatal(err)
				}
				if !sc.note(<-events) {
					b.Fatal("the session held the event back")
				}
			}
			b.StopTimer()
			if sc.rv != slice.ResourceVersion {
				b.Fatalf("resume point %q, want %q", sc.rv, slice.ResourceVersion)
			}
		})
	}
}
