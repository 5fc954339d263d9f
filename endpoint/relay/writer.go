package relay

import (
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	restclientwatch "k8s.io/client-go/rest/watch"

	"github.com/nodeproxy/nodeproxy/watchmux"
)

// Codecs is what a Writer needs of a scheme: the encoders of the media
// types it negotiates, and a decoder of the hub's JSON.
type Codecs struct {
	// Encoders encodes as kube-apiserver does (no conversion).
	Encoders runtime.NegotiatedSerializer
	// Decoder decodes the hub's JSON objects into typed ones.
	Decoder runtime.Decoder
}

// Writer writes the events of one hub channel to one client's watch.
type Writer struct {
	codecs Codecs
	enc    *restclientwatch.Encoder
}

// NewWriter writes to w in the stream serializer of info, objects of
// group version gv (the watch event itself is of meta/v1, which the
// scheme registers under v1).
func NewWriter(w io.Writer, info runtime.SerializerInfo, c Codecs, gv schema.GroupVersion) *Writer {
	frames := info.StreamSerializer.Framer.NewFrameWriter(w)
	return &Writer{
		codecs: c,
		enc: restclientwatch.NewEncoder(
			streaming.NewEncoder(frames, c.Encoders.EncoderForVersion(info.StreamSerializer.Serializer, schema.GroupVersion{Version: "v1"})),
			c.Encoders.EncoderForVersion(info.Serializer, gv)),
	}
}

// Write writes ev and returns the type it was written as: ERROR, with an
// internal error as its Status, when the hub's object cannot be decoded,
// which ends the watch so that the client lists again. An error is the
// client's connection failing.
func (w *Writer) Write(ev watchmux.Event) (watch.EventType, error) {
	var obj runtime.Object
	if ev.Type == watch.Error {
		obj = ev.Status
	} else {
		var err error
		if obj, err = runtime.Decode(w.codecs.Decoder, ev.Object); err != nil {
			obj = &apierrors.NewInternalError(fmt.Errorf("decode the hub's event: %w", err)).ErrStatus
			ev.Type = watch.Error
		}
	}
	return ev.Type, w.enc.Encode(&watch.Event{Type: ev.Type, Object: obj})
}
