package relay

import (
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	restclientwatch "k8s.io/client-go/rest/watch"

	"github.com/nodeproxy/nodeproxy/watchmux"
)

// Codecs is what a Writer needs of a scheme: the encoders of the media
// types it negotiates, and a decoder of the hub's objects.
type Codecs struct {
	// Encoders encodes as kube-apiserver does (no conversion).
	Encoders runtime.NegotiatedSerializer
	// Decoder decodes the hub's objects (JSON or protobuf) into typed
	// ones.
	Decoder runtime.Decoder
}

// Writer writes the events of one hub channel to one client's watch.
//
// An object that comes from the hub in the client's media type (JSON to a
// JSON watch, protobuf to a protobuf one: Protobuf says which to ask the
// hub for) is passed through as it came, wrapped in the watch event and
// its frame only: those bytes are what kube-apiserver's embedded encoder
// would have made of the object. A protobuf watch event around them is
// encoded by the same encoder as kube-apiserver's; a JSON one is written
// as encoding/json writes it, since running it through the encoder would
// only validate and compact the object again, which the hub's
// encoding/json output already is, at a third of the decoding's cost.
// Any other object (an
// older hub's JSON to a protobuf watch, a bookmark the hub sends as JSON)
// is decoded and encoded again, which costs an order of magnitude more
// (docs/benchmarks.md, "The node endpoint's relay").
type Writer struct {
	codecs Codecs
	// events writes a watch event whose object is already encoded.
	events streaming.Encoder
	// objects writes one from a typed object.
	objects *restclientwatch.Encoder
	// passThrough is the media type whose objects go through as they
	// came: JSON or protobuf; none for another.
	passThrough string
	// frames is the framed stream, for JSON events written by hand.
	frames io.Writer
	head   []byte // reused for a JSON event's head
}

// NewWriter writes to w in the stream serializer of info, objects of
// group version gv (the watch event itself is of meta/v1, which the
// scheme registers under v1).
func NewWriter(w io.Writer, info runtime.SerializerInfo, c Codecs, gv schema.GroupVersion) *Writer {
	frames := info.StreamSerializer.Framer.NewFrameWriter(w)
	events := streaming.NewEncoder(frames, c.Encoders.EncoderForVersion(info.StreamSerializer.Serializer, schema.GroupVersion{Version: "v1"}))
	wr := &Writer{
		frames:  frames,
		codecs:  c,
		events:  events,
		objects: restclientwatch.NewEncoder(events, c.Encoders.EncoderForVersion(info.Serializer, gv)),
	}
	switch info.MediaType {
	case runtime.ContentTypeJSON, runtime.ContentTypeProtobuf:
		wr.passThrough = info.MediaType
	}
	return wr
}

// Protobuf reports whether the client's objects are best asked of the hub
// in protobuf (watchmux.InProtobuf).
func (w *Writer) Protobuf() bool { return w.passThrough == runtime.ContentTypeProtobuf }

// Written is how Write wrote an event.
type Written struct {
	// Type is the event's type as written: ERROR, with an internal error
	// as its Status, when the hub's object could not be decoded, which
	// ends the watch so that the client lists again.
	Type watch.EventType
	// Reencoded is set when the object was decoded and encoded again
	// rather than passed through.
	Reencoded bool
}

// Write writes ev. An error is the client's connection failing.
func (w *Writer) Write(ev watchmux.Event) (Written, error) {
	if ev.Type == watch.Error {
		return Written{Type: ev.Type}, w.objects.Encode(&watch.Event{Type: ev.Type, Object: ev.Status})
	}
	if raw := w.asCame(ev); raw != nil {
		if w.passThrough == runtime.ContentTypeJSON {
			return Written{Type: ev.Type}, w.writeJSON(ev.Type, raw)
		}
		return Written{Type: ev.Type}, w.events.Encode(&metav1.WatchEvent{Type: string(ev.Type), Object: runtime.RawExtension{Raw: raw}})
	}
	raw := []byte(ev.Object)
	if ev.Protobuf != nil {
		raw = ev.Protobuf
	}
	obj, err := runtime.Decode(w.codecs.Decoder, raw)
	if err != nil {
		obj = &apierrors.NewInternalError(fmt.Errorf("decode the hub's event: %w", err)).ErrStatus
		ev.Type = watch.Error
	}
	return Written{Type: ev.Type, Reencoded: true}, w.objects.Encode(&watch.Event{Type: ev.Type, Object: obj})
}

// asCame is ev's object if it came in the client's media type, else nil.
func (w *Writer) asCame(ev watchmux.Event) []byte {
	switch {
	case w.passThrough == runtime.ContentTypeProtobuf && ev.Protobuf != nil:
		return ev.Protobuf
	case w.passThrough == runtime.ContentTypeJSON && ev.Protobuf == nil:
		return ev.Object
	}
	return nil
}

// writeJSON writes a JSON watch event of object, which is compact JSON,
// as encoding/json encodes a metav1.WatchEvent in a stream: the two
// fields in order, a newline after.
func (w *Writer) writeJSON(t watch.EventType, object []byte) error {
	w.head = append(append(append(w.head[:0], `{"type":"`...), t...), `","object":`...)
	if _, err := w.frames.Write(w.head); err != nil {
		return err
	}
	if _, err := w.frames.Write(object); err != nil {
		return err
	}
	_, err := w.frames.Write(jsonEventEnd)
	return err
}

// jsonEventEnd closes a JSON watch event. Never modified.
var jsonEventEnd = []byte("}\n")
