package get

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// streamedOperation is a created BulkGetOperation whose results are
// written straight from the cache's encoded objects to the response.
// k8s.io/apiserver's serializer hands a runtime.CacheableObject the writer
// (the hook kube-apiserver's watch cache uses to encode an object once for
// many watchers): the answer is never held in memory, where encoding the
// whole object held it twice (the results' buffer, then encoding/json's
// copy of every RawExtension).
type streamedOperation struct {
	*v1alpha1.BulkGetOperation // Status.Results empty
	answer                     *Answer
	// done releases what the request holds (its in-flight slot) once the
	// answer is written.
	done func()
}

var _ runtime.CacheableObject = (*streamedOperation)(nil)

// resultsPlaceholder stands for the results when the operation is encoded
// without them: the encoded object then ends with resultsTail, which the
// stream replaces with the results. The placeholder is the last value of
// the last field, so nothing the client sent can be mistaken for it.
var (
	resultsPlaceholder = []runtime.RawExtension{{Raw: []byte("null")}}
	resultsTail        = []byte(`"results":[null]}}` + "\n")
)

// CacheEncode writes the operation with encode, splicing the results in
// where encode would have copied them, when encode is the server's
// compact JSON; any other encoding gets the whole object, built in memory
// (bounded by MaxAnswerBytes).
func (s *streamedOperation) CacheEncode(id runtime.Identifier, encode func(runtime.Object, io.Writer) error, w io.Writer) error {
	defer s.done()
	if !compactJSON(id) {
		return encode(s.GetObject(), w)
	}
	head := *s.BulkGetOperation
	head.Status.Results = resultsPlaceholder
	var buf bytes.Buffer
	if err := encode(&head, &buf); err != nil {
		return err
	}
	b := buf.Bytes()
	if !bytes.HasSuffix(b, resultsTail) {
		return fmt.Errorf("encoded BulkGetOperation does not end with its results: %q", b[max(0, len(b)-64):])
	}
	if _, err := w.Write(b[:len(b)-len(resultsTail)+len(`"results":[`)]); err != nil {
		return fmt.Errorf("write the answer's head: %w", err)
	}
	if err := s.answer.writeResults(w); err != nil {
		return fmt.Errorf("write the answer's results: %w", err)
	}
	if _, err := io.WriteString(w, "]}}\n"); err != nil {
		return fmt.Errorf("write the answer's end: %w", err)
	}
	return nil
}

// GetObject is the operation with its results built in memory.
func (s *streamedOperation) GetObject() runtime.Object {
	op := s.BulkGetOperation.DeepCopy()
	op.Status.Results = s.answer.Results()
	return op
}

// compactJSON reports whether id is the identifier of k8s.io/apiserver's
// versioning codec around the compact JSON serializer: the encoding the
// stream reproduces byte for byte.
func compactJSON(id runtime.Identifier) bool {
	var codec struct{ Name, Encoder string }
	if json.Unmarshal([]byte(id), &codec) != nil || codec.Name != "versioning" {
		return false
	}
	var enc struct{ Name, Pretty, YAML string }
	if json.Unmarshal([]byte(codec.Encoder), &enc) != nil {
		return false
	}
	return enc.Name == "json" && enc.Pretty == "false" && enc.YAML == "false"
}

// once makes f safe to call more than once: the in-flight slot is released
// by whichever comes first, the answer written or the request ended.
func once(f func()) func() {
	var o sync.Once
	return func() { o.Do(f) }
}
