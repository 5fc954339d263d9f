package get

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/bulk/internal/bulktest"
)

// What one bulk get answer costs the hub, beyond the cache; the figures
// are in docs/benchmarks.md ("What one answer costs the hub"):
//
//	go test ./bulk/get -run '^$' -bench BulkGetAnswer -benchmem -benchtime 20x
//
// B/op is what answering allocates: the request as the REST handler
// answers it, then encoded by k8s.io/apiserver's JSON serializer (the
// versioning codec the server uses) to a writer that keeps nothing.

// responseEncoder is the encoder the generic server writes a
// bulkgetoperations answer with: JSON, compact, in bulk.k8s.io/v1alpha1.
func responseEncoder() runtime.Encoder {
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	scheme.AddKnownTypes(schema.GroupVersion{Group: v1alpha1.GroupName, Version: runtime.APIVersionInternal}, &v1alpha1.BulkGetOperation{})
	s := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{})
	return serializer.NewCodecFactory(scheme).EncoderForVersion(s, v1alpha1.SchemeGroupVersion)
}

// largeSecretShape is node-a's pod using one 700 KiB secret (the size of
// the one issue 14 read 300 times in one request).
func largeSecretShape(b testing.TB) *fixture {
	f := newFixture(b, 64)
	s := bulktest.Secret("ns", "big")
	s.Data = map[string][]byte{"data": []byte(strings.Repeat("x", 700<<10))}
	f.Add(b, s)
	f.Add(b, bulktest.Pod("ns", "p", "node-a", "big"))
	return f
}

func BenchmarkBulkGetAnswerLargeSecret(b *testing.B) {
	f := largeSecretShape(b)
	// No bound on the answer: the benchmark measures what one costs.
	rest := NewREST(f.getter, Limits{MaxAnswerBytes: 1 << 40, MaxInFlightPerUser: 1})
	enc := responseEncoder()
	ctx := request.WithUser(context.Background(), bulktest.NodeA)
	for _, copies := range []int{1, 100, 300} {
		b.Run(fmt.Sprintf("copies=%d", copies), func(b *testing.B) {
			ops := make([]v1alpha1.GetOperation, copies)
			for i := range ops {
				ops[i] = bulktest.FieldOp("secrets", "ns", "metadata.name=big")
			}
			b.ReportAllocs()
			for b.Loop() {
				op := &v1alpha1.BulkGetOperation{Spec: v1alpha1.BulkGetOperationSpec{Operations: ops}}
				out, err := rest.Create(ctx, op, nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				if err := enc.Encode(out, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
