package relay

import (
	"bytes"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/test/workload"
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

// endpointSlice is kube-proxy's typical object: a Service's slice of 10
// ready endpoints.
func endpointSlice() *discoveryv1.EndpointSlice { return workload.ServiceSlice("shop", "web", 10) }

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
