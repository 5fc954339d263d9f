package v1alpha1_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	bulkv1alpha1 "github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// TestDecodesTheDocumentedBody decodes, strictly, the request body the
// API documentation shows.
func TestDecodesTheDocumentedBody(t *testing.T) {
	body := []byte(`apiVersion: bulk.k8s.io/v1alpha1
kind: BulkGetOperation
spec:
  operations:
  - resource: {group: "", version: v1, resource: secrets}
    namespace: default
    options: {fieldSelector: metadata.name=db-password}
  - resource: {group: "", version: v1, resource: pods}
    options: {fieldSelector: spec.nodeName=node-a}
`)
	scheme := runtime.NewScheme()
	if err := bulkv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	codecs := serializer.NewCodecFactory(scheme, serializer.EnableStrict)
	obj, gvk, err := codecs.UniversalDeserializer().Decode(body, nil, nil)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	op, ok := obj.(*bulkv1alpha1.BulkGetOperation)
	if !ok || gvk.Kind != "BulkGetOperation" {
		t.Fatalf("decoded %T (%v)", obj, gvk)
	}
	if len(op.Spec.Operations) != 2 {
		t.Fatalf("operations = %d, want 2", len(op.Spec.Operations))
	}
	first, second := op.Spec.Operations[0], op.Spec.Operations[1]
	if first.Resource.Resource != "secrets" || first.Namespace != "default" || first.Options.FieldSelector != "metadata.name=db-password" {
		t.Errorf("first operation = %+v", first)
	}
	if second.Resource.Resource != "pods" || second.Namespace != "" || second.Options.FieldSelector != "spec.nodeName=node-a" {
		t.Errorf("second operation = %+v", second)
	}
	if cp := op.DeepCopy(); cp.Spec.Operations[0].Resource != first.Resource {
		t.Errorf("deep copy differs")
	}
}
