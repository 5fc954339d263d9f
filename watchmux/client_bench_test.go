package watchmux

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
)

// BenchmarkClientEvent measures what one event message costs a session's
// consumer side, the node endpoint's share before it writes the event
// out (endpoint/relay's BenchmarkRelay): the client reads the message
// into an Event, and the session takes in its resourceVersion. An
// EndpointSlice of 10 endpoints, as a JSON text message and as a binary
// one with a protobuf object. One op is one message; docs/benchmarks.md
// has the figures.
func BenchmarkClientEvent(b *testing.B) {
	slice := benchSlice()
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

// benchSlice is endpoint/relay's benchmark EndpointSlice: a Service's 10
// ready endpoints on 2 ports.
func benchSlice() *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-x7k2p", Namespace: "shop", GenerateName: "web-", UID: "5f0c8e53-1d7c-4a7e-9a3c-3b0b2f8c1e11",
			ResourceVersion: "184467", Generation: 42, CreationTimestamp: metav1.Unix(1764000000, 0),
			Labels: map[string]string{
				"endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
				"kubernetes.io/service-name":             "web",
			},
			Annotations: map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "2026-11-26T04:00:00Z"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)},
			{Name: ptr.To("metrics"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](9090)},
		},
	}
	for i := range 10 {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{"10.244." + strconv.Itoa(i) + ".17"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			NodeName:   ptr.To("node-" + strconv.Itoa(i)),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "web-" + strconv.Itoa(i)},
		})
	}
	return es
}
