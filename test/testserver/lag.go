package testserver

import (
	"io"
	"net/http"
	"strings"
	"time"

	"k8s.io/client-go/transport"
)

// LagWatches makes a replica lag behind kube-apiserver on one resource:
// the returned wrapper (for hub.Options.KubeTransportWrapper) holds
// every chunk of that resource's watch streams for d before handing it to
// the reflector, as a replica whose watch is slow (a loaded kube-apiserver,
// a long network path, a busy hub) would see it. Lists, the refresher's
// included, go through untouched, and so do the metadata-only watches the
// hub probes kube-apiserver's progress with: they are questions to
// kube-apiserver, as the lists are, not the cache's feed.
func LagWatches(resource string, d time.Duration) transport.WrapperFunc {
	return func(rt http.RoundTripper) http.RoundTripper {
		return lagging{rt: rt, resource: "/" + resource, d: d}
	}
}

type lagging struct {
	rt       http.RoundTripper
	resource string
	d        time.Duration
}

func (l lagging) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.rt.RoundTrip(req)
	if err != nil || req.URL.Query().Get("watch") != "true" || !strings.HasSuffix(req.URL.Path, l.resource) ||
		strings.Contains(req.Header.Get("Accept"), "as=PartialObjectMetadata") {
		return resp, err
	}
	resp.Body = &laggingBody{ReadCloser: resp.Body, d: l.d}
	return resp, nil
}

// laggingBody holds each chunk the stream brings, not each read of its
// reader: a protobuf watch decoder reads an event's 4-byte length and
// then its body, where a JSON decoder reads whole buffers, and the lag
// must not depend on the encoding the hub asks for.
type laggingBody struct {
	io.ReadCloser
	d       time.Duration
	chunk   []byte
	pending []byte // of the last chunk, what the reader has not read
	err     error  // what came with the last chunk
}

func (b *laggingBody) Read(p []byte) (int, error) {
	if len(b.pending) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		if b.chunk == nil {
			b.chunk = make([]byte, 32<<10)
		}
		n, err := b.ReadCloser.Read(b.chunk)
		if n == 0 {
			return 0, err
		}
		time.Sleep(b.d)
		b.pending, b.err = b.chunk[:n], err
	}
	n := copy(p, b.pending)
	b.pending = b.pending[n:]
	return n, nil
}
