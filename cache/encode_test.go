package cache

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/randfill"

	"github.com/nodeproxy/nodeproxy/test/workload"
)

// TestEncodeProtobufIsKubeAPIServersEncoding: for every type served, an
// object filled at random, as the store holds it (no type meta, no
// managedFields), encodes to the bytes kube-apiserver's protobuf
// serializer makes of it with its type meta set: what a protobuf watch
// embeds in its events.
func TestEncodeProtobufIsKubeAPIServersEncoding(t *testing.T) {
	codecs := serializer.NewCodecFactory(scheme.Scheme).WithoutConversion()
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok {
		t.Fatal("no protobuf serializer")
	}
	enc, err := NewEncoder(64)
	if err != nil {
		t.Fatal(err)
	}
	fill := randfill.NewWithSeed(1).NilChance(0.2).NumElements(1, 3)
	for _, r := range served {
		t.Run(r.kind, func(t *testing.T) {
			s := newStore(r, 8)
			for i := range 20 {
				obj := r.example.DeepCopyObject()
				fill.Fill(obj)
				meta := obj.(metav1.Object)
				meta.SetResourceVersion(strconv.Itoa(i + 1)) // a new version each round, not a cached one
				meta.SetManagedFields(nil)
				want := obj.DeepCopyObject()
				want.GetObjectKind().SetGroupVersionKind(r.gvr.GroupVersion().WithKind(r.kind))
				var b bytes.Buffer
				if err := info.Serializer.Encode(want, &b); err != nil {
					t.Fatal(err)
				}
				o, err := newObject(obj)
				if err != nil {
					t.Fatal(err)
				}
				got, err := enc.EncodeProtobuf(s, o)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, b.Bytes()) {
					t.Fatalf("round %d: EncodeProtobuf differs from kube-apiserver's serializer:\n got %q\nwant %q", i, got, b.Bytes())
				}
			}
		})
	}
}

// BenchmarkEncodeObject measures what the hub pays once per object
// version and encoding (the Encoder caches the bytes for every channel):
// kube-proxy's typical EndpointSlice as JSON, for bulk gets and JSON
// channels, and as protobuf, for channels that ask for it; and a
// Deployment's running pod (workload.DeploymentPod) kept decoded and kept
// as bytes, as JSON, as protobuf, and decoded for a reader that needs it
// typed (a node view, for its references); and a 1 KiB secret (the one
// of BenchmarkBytesPerSecret) likewise: the JSON of a secret kept as
// bytes is what a bulk get's first read of a version costs.
// docs/benchmarks.md has the figures.
//
//	go test ./cache -run '^$' -bench EncodeObject -count 5
func BenchmarkEncodeObject(b *testing.B) {
	slices := newStore(servedKind(b, "EndpointSlice"), 8)
	slice, err := newObject(workload.ServiceSlice("shop", "web", 10))
	if err != nil {
		b.Fatal(err)
	}
	pods := newStore(servedKind(b, "Pod"), 8)
	pod := func() *corev1.Pod {
		p := workload.DeploymentPod("shop", "web", 1, "node-1", workload.PodRunning)
		p.ResourceVersion = "7"
		return p
	}
	decoded, err := newObject(pod())
	if err != nil {
		b.Fatal(err)
	}
	asBytes, err := newObject(pod())
	if err != nil {
		b.Fatal(err)
	}
	if err := asBytes.keepBytes("v1", "Pod", metadataSpecStatus, nil); err != nil {
		b.Fatal(err)
	}
	secrets := newStore(servedKind(b, "Secret"), 8)
	secret := func() *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "0b1a6c2e-4b8f-4a3e-9d6e-000000000001",
			ResourceVersion: "7", Labels: map[string]string{"app": "web"}}, Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{"password": []byte(strings.Repeat("x", 1024))}}
	}
	secretDecoded, err := newObject(secret())
	if err != nil {
		b.Fatal(err)
	}
	secretBytes, err := newObject(secret())
	if err != nil {
		b.Fatal(err)
	}
	if err := secretBytes.keepBytes("v1", "Secret", metadataRest, nil); err != nil {
		b.Fatal(err)
	}
	joined := func(_ *Store, o *Object) ([]byte, error) { return o.raw.join(), nil }
	typed := func(_ *Store, o *Object) ([]byte, error) { _, err := o.Typed(); return nil, err }
	for _, tc := range []struct {
		name   string
		s      *Store
		o      *Object
		encode func(*Store, *Object) ([]byte, error)
	}{
		{"endpointslice/json", slices, slice, encodeObject},
		{"endpointslice/protobuf", slices, slice, encodeProtobuf},
		{"pod/kept=decoded/json", pods, decoded, encodeObject},
		{"pod/kept=decoded/protobuf", pods, decoded, encodeProtobuf},
		{"pod/kept=decoded/typed", pods, decoded, typed},
		{"pod/kept=bytes/json", pods, asBytes, encodeObject},
		{"pod/kept=bytes/protobuf", pods, asBytes, joined},
		{"pod/kept=bytes/typed", pods, asBytes, typed},
		{"secret/kept=decoded/json", secrets, secretDecoded, encodeObject},
		{"secret/kept=decoded/protobuf", secrets, secretDecoded, encodeProtobuf},
		{"secret/kept=bytes/json", secrets, secretBytes, encodeObject},
		{"secret/kept=bytes/protobuf", secrets, secretBytes, joined},
		{"secret/kept=bytes/typed", secrets, secretBytes, typed},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tc.encode(tc.s, tc.o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestEncodeUncachedSharesOnlyWhatIsCached: EncodeUncached returns the
// LRU's bytes for a version a reader encoded with Encode, and otherwise
// the same bytes without keeping them, so that the next Encode encodes
// afresh.
func TestEncodeUncachedSharesOnlyWhatIsCached(t *testing.T) {
	s := newStore(servedKind(t, "Secret"), 8)
	obj := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", ResourceVersion: "5"}, Data: map[string][]byte{"k": []byte("v")}}
	o, err := newObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := NewEncoder(8)
	if err != nil {
		t.Fatal(err)
	}
	alone, err := enc.EncodeUncached(s, o)
	if err != nil {
		t.Fatal(err)
	}
	if enc.lru.Len() != 0 {
		t.Fatalf("EncodeUncached kept %d entries", enc.lru.Len())
	}
	cached, err := enc.Encode(s, o)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(alone, cached) {
		t.Fatalf("EncodeUncached %q, Encode %q", alone, cached)
	}
	again, err := enc.EncodeUncached(s, o)
	if err != nil {
		t.Fatal(err)
	}
	if &again[0] != &cached[0] {
		t.Fatal("EncodeUncached encoded a version the LRU holds")
	}
}

// servedKind is the served resource of kind.
func servedKind(t testing.TB, kind string) resource {
	t.Helper()
	for _, r := range served {
		if r.kind == kind {
			return r
		}
	}
	t.Fatalf("%s is not served", kind)
	return resource{}
}
