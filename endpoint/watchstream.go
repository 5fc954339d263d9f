package endpoint

import (
	"net/http"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"

	"github.com/nodeproxy/nodeproxy/endpoint/relay"
)

// watchStream is a watch response written as kube-apiserver writes one:
// chunked, in the stream media type the request negotiates, its events
// framed by relay.Writer.
type watchStream struct {
	w       http.ResponseWriter
	info    runtime.SerializerInfo
	flusher http.Flusher
	events  *relay.Writer
}

// newWatchStream negotiates req's media type for a watch of objects of
// gv; false if it cannot be served here (kube-apiserver words the 406).
func newWatchStream(w http.ResponseWriter, req *http.Request, gv schema.GroupVersion) (*watchStream, bool) {
	info, err := negotiation.NegotiateOutputMediaTypeStream(req, codecs, negotiation.DefaultEndpointRestrictions)
	if err != nil {
		return nil, false
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		return nil, false
	}
	return &watchStream{w: w, info: info, flusher: flusher,
		events: relay.NewWriter(w, info, relay.Codecs{Encoders: codecs, Decoder: deserializer}, gv)}, true
}

// start writes the response's head, 200.
func (s *watchStream) start() {
	mediaType := s.info.MediaType
	if mediaType != "application/json" {
		mediaType += ";stream=watch"
	}
	s.w.Header().Set("Content-Type", mediaType)
	s.w.Header().Set("Transfer-Encoding", "chunked")
	s.w.WriteHeader(http.StatusOK)
	s.flusher.Flush()
}
