package get

import (
	"bytes"
	"context"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/bulk/internal/bulktest"
)

func copiesOf(n int, op v1alpha1.GetOperation) *v1alpha1.BulkGetOperation {
	ops := make([]v1alpha1.GetOperation, n)
	for i := range ops {
		ops[i] = op
	}
	return &v1alpha1.BulkGetOperation{Spec: v1alpha1.BulkGetOperationSpec{Operations: ops}}
}

// TestStreamedAnswerIsTheEncodedObject: the answer written from the cache
// is byte for byte what the server's JSON serializer makes of the whole
// object, continue tokens and empty lists included.
func TestStreamedAnswerIsTheEncodedObject(t *testing.T) {
	f := newFixture(t, 64)
	for _, n := range []string{"s1", "s2", "s3"} {
		f.Add(t, bulktest.Secret("ns", n))
	}
	f.Add(t, bulktest.Pod("ns", "p", "node-a", "s1"))
	r := NewREST(f.getter, DefaultLimits())
	op := &v1alpha1.BulkGetOperation{Spec: v1alpha1.BulkGetOperationSpec{Operations: []v1alpha1.GetOperation{
		bulktest.FieldOp("secrets", "ns", "metadata.name=s1"),
		bulktest.GetOp("secrets", "ns", metav1.ListOptions{Limit: 2}),
		bulktest.FieldOp("configmaps", "ns", "metadata.name=none"),
	}}}
	out, err := r.Create(request.WithUser(context.Background(), bulktest.Admin), op, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	enc := responseEncoder()
	var streamed, whole bytes.Buffer
	if err := enc.Encode(out, &streamed); err != nil {
		t.Fatal(err)
	}
	if err := enc.Encode(out.(kruntime.CacheableObject).GetObject(), &whole); err != nil {
		t.Fatal(err)
	}
	if streamed.String() != whole.String() {
		t.Fatalf("streamed answer differs from the encoded object:\nstreamed %s\nwhole    %s", streamed.String(), whole.String())
	}
	if !strings.Contains(whole.String(), `"continue":"`) || !strings.Contains(whole.String(), `"kind":"ConfigMapList"`) {
		t.Fatalf("answer lacks a list: %s", whole.String())
	}

	// Indented JSON (curl's, or ?pretty) is not streamed, but answered.
	pretty := prettyEncoder()
	var indented bytes.Buffer
	if err := pretty.Encode(out, &indented); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(indented.String(), "\n    \"status\"") && !strings.Contains(indented.String(), "\n  \"status\"") {
		t.Fatalf("indented answer: %s", indented.String())
	}
}

func prettyEncoder() kruntime.Encoder {
	scheme := kruntime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	s := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{Pretty: true})
	return serializer.NewCodecFactory(scheme).EncoderForVersion(s, v1alpha1.SchemeGroupVersion)
}

// TestAnswerCostsNoCopyOfItsItems: 100 copies of a 700 KiB secret in one
// answer (95 MB of JSON), the shape of issue 14's 287 MB answer, allocate
// less than a tenth of the answer: the items are written from the cache's
// bytes. Built in memory, the answer allocated 133 MB; streamed, 130 KB
// (BenchmarkBulkGetAnswerLargeSecret; about 1 MB under -race, which
// defeats sync.Pool). The bound is loose so that nothing else the process
// allocates meanwhile can fail the test, and still fails a copy.
func TestAnswerCostsNoCopyOfItsItems(t *testing.T) {
	f := largeSecretShape(t)
	r := NewREST(f.getter, Limits{MaxAnswerBytes: 1 << 30, MaxInFlightPerUser: 1})
	enc := responseEncoder()
	ctx := request.WithUser(context.Background(), bulktest.NodeA)
	var size countingWriter
	answer := func() {
		out, err := r.Create(ctx, copiesOf(100, bulktest.FieldOp("secrets", "ns", "metadata.name=big")), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var n countingWriter
		if err := enc.Encode(out, &n); err != nil {
			t.Fatal(err)
		}
		if n < 100*700<<10 {
			t.Fatalf("answer of %d bytes, want 100 copies of 700 KiB", n)
		}
		size = n
	}
	answer() // encodes the secret once, into the cache
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	answer()
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got >= uint64(size)/10 {
		t.Errorf("an answer of %d bytes (100 copies of a 700 KiB secret) allocated %d bytes, want less than a tenth of it", size, got)
	}
}

type countingWriter int

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}

// TestAnswerLargerThanTheBoundIsRefused: 413 naming the bound and the
// flag, before anything is written; an answer within it is served.
func TestAnswerLargerThanTheBoundIsRefused(t *testing.T) {
	f := largeSecretShape(t)
	r := NewREST(f.getter, Limits{MaxAnswerBytes: 8 << 20, MaxInFlightPerUser: 4})
	ctx := request.WithUser(context.Background(), bulktest.NodeA)
	_, err := r.Create(ctx, copiesOf(10, bulktest.FieldOp("secrets", "ns", "metadata.name=big")), nil, nil)
	var status apierrors.APIStatus
	if !apierrors.IsRequestEntityTooLargeError(err) {
		t.Fatalf("answer of 10 copies of 700 KiB with a bound of 8 MiB: %v, want 413", err)
	}
	status = err.(apierrors.APIStatus)
	if s := status.Status(); s.Code != http.StatusRequestEntityTooLarge || !strings.Contains(s.Message, "8388608") || !strings.Contains(s.Message, "--bulk-get-max-answer-bytes") {
		t.Fatalf("refusal does not name the bound: %+v", s)
	}
	out, err := r.Create(ctx, copiesOf(5, bulktest.FieldOp("secrets", "ns", "metadata.name=big")), nil, nil)
	if err != nil {
		t.Fatalf("5 copies within the bound: %v", err)
	}
	if err := responseEncoder().Encode(out, new(countingWriter)); err != nil {
		t.Fatal(err)
	}
}

// TestInFlightBoundIsPerCaller: a caller with MaxInFlightPerUser answers
// not yet written gets 429 with Retry-After; another caller is served; a
// written answer, or a request that ended, frees its slot.
func TestInFlightBoundIsPerCaller(t *testing.T) {
	f := newFixture(t, 64)
	f.Add(t, bulktest.Secret("ns", "s"))
	f.Add(t, bulktest.Pod("ns", "p", "node-a", "s"))
	r := NewREST(f.getter, Limits{MaxAnswerBytes: 1 << 20, MaxInFlightPerUser: 2})
	op := func() *v1alpha1.BulkGetOperation {
		return copiesOf(1, bulktest.FieldOp("secrets", "ns", "metadata.name=s"))
	}
	nodeCtx := request.WithUser(context.Background(), bulktest.NodeA)
	first, err := r.Create(nodeCtx, op(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(nodeCtx)
	if _, err := r.Create(ended, op(), nil, nil); err != nil {
		t.Fatal(err)
	}
	_, err = r.Create(nodeCtx, op(), nil, nil)
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("third request in flight: %v, want 429", err)
	}
	if secs, ok := apierrors.SuggestsClientDelay(err); !ok || secs < 1 {
		t.Errorf("429 without Retry-After: %v", err)
	}
	if _, err := r.Create(request.WithUser(context.Background(), bulktest.Admin), op(), nil, nil); err != nil {
		t.Fatalf("another caller while node-a is at its bound: %v", err)
	}
	if err := responseEncoder().Encode(first, new(countingWriter)); err != nil {
		t.Fatal(err)
	}
	// The written answer freed its slot at once.
	if _, err := r.Create(request.WithUser(context.Background(), bulktest.NodeA), op(), nil, nil); err != nil {
		t.Fatalf("request after an answer was written: %v", err)
	}
	// The second request ended without its answer written: its slot is
	// freed when its context ends (on a goroutine of its own).
	cancel()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, err := r.Create(nodeCtx, op(), nil, nil)
		return err == nil, nil
	}); err != nil {
		t.Fatal("the slot of a request that ended was not freed")
	}
}
