package watchmux

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/internal/kubeproto"
)

// frame is one message waiting to be written. An event frame points at
// the object's encoded bytes, shared with the cache and every other
// channel that carries the object; the channel and type are written
// around them, so fanning an object out to thousands of channels copies
// nothing.
type frame struct {
	ch     *channel // nil for responses
	typ    watch.EventType
	object []byte
	// raw is a complete message (responses).
	raw []byte
	// final marks a channel's ERROR, written although the channel is
	// closed; unbounded an initial event, not counted in the channel's
	// queue.
	final, unbounded bool
}

// binary reports whether f goes as a binary message: an event whose
// object is protobuf (WatchSubprotocolProtobuf). kube-apiserver's own
// decoders tell protobuf from JSON by the same magic, which no JSON
// document can begin with.
func (f *frame) binary() bool {
	return f.raw == nil && kubeproto.IsProtobuf(f.object)
}

// writeTo writes f as one message body: a text message's JSON, or a
// binary message's JSON head, newline, and protobuf object.
func (f *frame) writeTo(w io.Writer) error {
	if f.raw != nil {
		_, err := w.Write(f.raw)
		return err
	}
	binary := f.binary()
	var head [64]byte
	b := append(head[:0], `{"channel":`...)
	b = strconv.AppendInt(b, f.ch.id, 10)
	b = append(b, `,"type":"`...)
	b = append(b, f.typ...)
	if binary {
		b = append(b, "\"}\n"...)
	} else {
		b = append(b, `","object":`...)
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	if _, err := w.Write(f.object); err != nil {
		return err
	}
	if binary {
		return nil
	}
	_, err := w.Write(closeBrace)
	return err
}

// closeBrace ends an event message; a variable, so writing it does not
// allocate. Never modified.
var closeBrace = []byte{'}'}

func responseFrame(r v1alpha1.WatchResponse) frame {
	if r.Error != nil {
		r.Error = withTypeMeta(r.Error)
	}
	raw, err := json.Marshal(v1alpha1.ServerMessage{Response: &r})
	if err != nil {
		// Unreachable: a response is ints and a Status. Say so rather
		// than send nothing.
		klog.ErrorS(err, "Encoding a bulk watch response")
		raw = fmt.Appendf(nil, `{"response":{"requestID":%d,"error":{"kind":"Status","apiVersion":"v1","status":"Failure","code":500}}}`, r.RequestID)
	}
	return frame{raw: raw}
}

// statusJSON encodes the object of an ERROR event.
func statusJSON(s *metav1.Status) []byte {
	raw, err := json.Marshal(withTypeMeta(s))
	if err != nil {
		klog.ErrorS(err, "Encoding a bulk watch error")
		return []byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":500}`)
	}
	return raw
}

func withTypeMeta(s *metav1.Status) *metav1.Status {
	out := *s
	out.Kind, out.APIVersion = "Status", "v1"
	if out.Status == "" {
		out.Status = metav1.StatusFailure
	}
	return &out
}

// readBinaryEvent reads a binary message into msg, the event without its
// object, and returns the object's protobuf bytes.
func readBinaryEvent(data []byte, msg *v1alpha1.ServerMessage) ([]byte, error) {
	head, object, ok := bytes.Cut(data, []byte{'\n'})
	if !ok || !kubeproto.IsProtobuf(object) {
		return nil, fmt.Errorf("server sent a binary message that is not an event with a protobuf object")
	}
	if err := json.Unmarshal(head, msg); err != nil || msg.Response != nil || msg.Object != nil || msg.Type == watch.Error {
		return nil, fmt.Errorf("server sent a binary message whose head is not an event's: %q", head)
	}
	return object, nil
}
