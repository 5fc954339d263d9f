package relay

import (
	"bytes"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/watchmux"
)

// The tests' scheme: the endpoint's groups that the tests use, Status and
// the watch event.
var (
	testScheme = func() *runtime.Scheme {
		s := runtime.NewScheme()
		utilruntime.Must(corev1.AddToScheme(s))
		utilruntime.Must(discoveryv1.AddToScheme(s))
		metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
		return s
	}()
	testFactory = serializer.NewCodecFactory(testScheme)
	testCodecs  = Codecs{Encoders: testFactory.WithoutConversion(), Decoder: testFactory.UniversalDeserializer()}
)

// streamInfo is the serializer kube-apiserver picks for a watch in
// mediaType.
func streamInfo(tb testing.TB, mediaType string) runtime.SerializerInfo {
	tb.Helper()
	info, ok := runtime.SerializerInfoForMediaType(testCodecs.Encoders.SupportedMediaTypes(), mediaType)
	if !ok || info.StreamSerializer == nil {
		tb.Fatalf("no stream serializer for %s", mediaType)
	}
	return info
}

func gvOf(obj runtime.Object) schema.GroupVersion {
	return obj.GetObjectKind().GroupVersionKind().GroupVersion()
}

// endpointSlice is a Service's slice of 10 ready endpoints on 2 ports, as
// kube-proxy watches them, with type meta as the hub sends it.
func endpointSlice() *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-x7k2p", Namespace: "shop", GenerateName: "web-", UID: "5f0c8e53-1d7c-4a7e-9a3c-3b0b2f8c1e11",
			ResourceVersion: "184467", Generation: 42,
			CreationTimestamp: metav1.Unix(1764000000, 0),
			Labels: map[string]string{
				"endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
				"kubernetes.io/service-name":             "web",
			},
			Annotations:     map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "2026-11-26T04:00:00Z"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: "0b6e1a9c-7f2d-4b8e-a1c4-9d3e5f7a2b60", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
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
			Zone:       ptr.To("zone-a"),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "web-7d9f8b6c5-" + strconv.Itoa(i), UID: types.UID("c4f1e2d3-0000-4000-8000-00000000000" + strconv.Itoa(i))},
		})
	}
	return es
}

// secret is a TLS secret of the size a pod mounts.
func secret() *corev1.Secret {
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-tls", Namespace: "shop", UID: "9a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d", ResourceVersion: "184470",
			CreationTimestamp: metav1.Unix(1764000000, 0), Labels: map[string]string{"app": "web"},
		},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{
			"tls.crt": make([]byte, 1200),
			"tls.key": make([]byte, 1700),
			"ca.crt":  make([]byte, 1100),
		},
	}
}

// hubEvent is obj as the hub sends it on a channel, its object encoded
// in mediaType as kube-apiserver encodes one.
func hubEvent(tb testing.TB, t watch.EventType, obj runtime.Object, mediaType string) watchmux.Event {
	tb.Helper()
	info, ok := runtime.SerializerInfoForMediaType(testCodecs.Encoders.SupportedMediaTypes(), mediaType)
	if !ok {
		tb.Fatalf("no serializer for %s", mediaType)
	}
	raw, err := runtime.Encode(testCodecs.Encoders.EncoderForVersion(info.Serializer, gvOf(obj)), obj)
	if err != nil {
		tb.Fatal(err)
	}
	if mediaType == runtime.ContentTypeProtobuf {
		return watchmux.Event{Type: t, Protobuf: raw}
	}
	return watchmux.Event{Type: t, Object: bytes.TrimSuffix(raw, []byte("\n"))}
}

// testGV is core/v1, where the scheme registers Status and the watch
// event.
var testGV = schema.GroupVersion{Version: "v1"}

// hubEventRaw is an event whose object is JSON bytes as given.
func hubEventRaw(t watch.EventType, object []byte) watchmux.Event {
	return watchmux.Event{Type: t, Object: object}
}

type nopCloser struct{ *bytes.Buffer }

func (nopCloser) Close() error { return nil }
