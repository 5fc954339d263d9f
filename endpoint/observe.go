package endpoint

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/nodecopy"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// What the kubelet is served of its node's view by another way than the
// copy (kube-apiserver, while the hub is away or cannot answer; the
// hub's channels and bulk gets, while the copy cannot) the copy takes
// in as it is served (nodecopy.Copy.Observe): a state newer than its own
// replaces it, a deletion removes the object for good. So the copy never
// answers older than what the node was served, live or offline, and a
// node that lost the hub first and kube-apiserver later keeps, offline,
// every change kube-apiserver served it in between (docs/api.md, "What
// the copy never forgets").
//
// Observing is done before the kubelet gets the answer: a get or a list
// is read whole and taken in before it is passed on; a watch's events
// are taken in as each one's last byte is read from kube-apiserver, so
// that the kubelet holds no event the copy has not taken in. What cannot
// be read (an answer that does not decode, a frame too large) leaves
// the copy unable to vouch for what it holds (viewFollower.distrust):
// offline, it then serves nothing, until the hub has brought it past
// that moment.

// maxObserved bounds what the endpoint reads of one answer to observe
// it: kube-apiserver's own limit on a request's response is far above
// what a node's reads return (a list of every Service is the largest),
// and an answer past it is passed on unread, the copy distrusted.
const maxObserved = 64 << 20

// Why the copy could not take in what the kubelet was served, the values
// of the unobserved metric's "reason" label.
const (
	unobservedUndecodable = "undecodable" // an answer or event that did not decode
	unobservedTooLarge    = "too_large"   // an answer or frame past maxObserved
	unobservedRefused     = "refused"     // an object the copy refused (outside the node's view)
)

// observeResponse takes in resp, kube-apiserver's answer to the kubelet's
// read r, before the kubelet gets it. A watch's body is replaced by one
// that observes each event as it passes.
func (e *Endpoint) observeResponse(resp *http.Response, r *copyRead) {
	if r.verb == "watch" {
		if resp.StatusCode == http.StatusOK {
			resp.Body = e.newObservedWatch(resp, r)
		}
		return
	}
	switch {
	case resp.StatusCode == http.StatusNotFound && r.verb == "get":
		// Gone, at a version kube-apiserver does not say: no later
		// than the newest the node has seen.
		e.view.observeItems(r, e.view.newestSeen(), nil)
		return
	case resp.StatusCode != http.StatusOK:
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxObserved+1))
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		// The kubelet gets the same error reading what was read.
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
		return
	}
	if len(body) > maxObserved {
		e.view.distrust(unobservedTooLarge, errors.New("an answer larger than the endpoint observes"))
		return
	}
	plain, err := decoded(body, resp.Header.Get("Content-Encoding"))
	if err == nil {
		err = e.view.observeAnswer(r, plain)
	}
	if err != nil {
		e.view.distrust(unobservedUndecodable, fmt.Errorf("kube-apiserver's answer to a %s of %s: %w", r.verb, r.viewType().Resource, err))
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// decoded is body without its Content-Encoding.
func decoded(body []byte, encoding string) ([]byte, error) {
	switch encoding {
	case "", "identity":
		return body, nil
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		return io.ReadAll(io.LimitReader(zr, maxObserved))
	}
	return nil, fmt.Errorf("content encoding %q", encoding)
}

// observeAnswer takes in body, an answer to r: an object (get), or a
// list, which is the whole of what r's filter selects at its version.
func (f *viewFollower) observeAnswer(r *copyRead, body []byte) error {
	obj, err := runtime.Decode(deserializer, body)
	if err != nil {
		return err
	}
	if r.verb == "get" {
		return f.observeObject(watch.Modified, obj)
	}
	return f.observeList(r, obj)
}

// observeObject takes in one state served (ADDED, MODIFIED), or a
// deletion (DELETED).
func (f *viewFollower) observeObject(t watch.EventType, obj runtime.Object) error {
	raw, rv, err := viewJSON(obj)
	if err != nil {
		return err
	}
	f.seen(rv)
	f.observe([]nodecopy.Observed{{Type: t, Object: raw}})
	return nil
}

// observeList takes in list, an answer to r.
func (f *viewFollower) observeList(r *copyRead, list runtime.Object) error {
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return err
	}
	rv, err := strconv.ParseUint(lm.GetResourceVersion(), 10, 64)
	if err != nil {
		return fmt.Errorf("the list's resourceVersion %q: %w", lm.GetResourceVersion(), err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	raws := make([][]byte, 0, len(items))
	for _, item := range items {
		raw, _, err := viewJSON(item)
		if err != nil {
			return err
		}
		raws = append(raws, raw)
	}
	f.seen(rv)
	f.observeItems(r, rv, raws)
	return nil
}

// viewJSON is obj as the view carries it: JSON with apiVersion and kind,
// without managedFields, as the hub keeps objects; and its version.
func viewJSON(obj runtime.Object) ([]byte, uint64, error) {
	gvks, _, err := scheme.ObjectKinds(obj)
	if err != nil || len(gvks) == 0 {
		return nil, 0, fmt.Errorf("an object of no known kind: %w", err)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, 0, err
	}
	rv, err := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("resourceVersion %q: %w", m.GetResourceVersion(), err)
	}
	m.SetManagedFields(nil)
	obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	raw, err := json.Marshal(obj)
	return raw, rv, err
}

// observe and observeItems take in what was served, and count and log
// what the copy refused: an object no node may have.
func (f *viewFollower) observe(obs []nodecopy.Observed) {
	refused, n, passed := f.copy.Observe(obs)
	f.noteObserved(refused, n, passed)
}

func (f *viewFollower) observeItems(r *copyRead, rv uint64, items [][]byte) {
	refused, n, passed := f.copy.ObserveList(r.typ, r.filter, rv, items)
	f.noteObserved(refused, n, passed)
}

func (f *viewFollower) noteObserved(refused []error, n, passed int) {
	observedChanges.Add(float64(n))
	observedOutside.Add(float64(passed))
	for _, err := range refused {
		f.distrust(unobservedRefused, err)
	}
}

// newObservedWatch is resp's body, observing each event of the watch r
// as its last byte is read.
func (e *Endpoint) newObservedWatch(resp *http.Response, r *copyRead) io.ReadCloser {
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	var info runtime.SerializerInfo
	for _, i := range codecs.SupportedMediaTypes() {
		if i.MediaType == mediaType && i.StreamSerializer != nil {
			info = i
		}
	}
	if info.StreamSerializer == nil || resp.Header.Get("Content-Encoding") != "" {
		e.view.distrust(unobservedUndecodable, fmt.Errorf("a watch of %s in %q, %q", r.viewType().Resource, mediaType, resp.Header.Get("Content-Encoding")))
		return resp.Body
	}
	return &observedWatch{ReadCloser: resp.Body, view: e.view, r: r,
		protobuf: mediaType == runtime.ContentTypeProtobuf, decoder: info.StreamSerializer.Serializer}
}

// observedWatch is a watch's body that takes in each event as it passes:
// frames are cut as kube-apiserver writes them, length-prefixed for
// protobuf, one JSON object a line otherwise.
type observedWatch struct {
	io.ReadCloser
	view     *viewFollower
	r        *copyRead
	protobuf bool
	decoder  runtime.Decoder
	once     sync.Once // distrusts once
	failed   bool      // stopped observing
	buf      []byte
}

func (w *observedWatch) Read(p []byte) (int, error) {
	n, err := w.ReadCloser.Read(p)
	if n > 0 && !w.failed {
		w.buf = append(w.buf, p[:n]...)
		w.frames()
	}
	return n, err
}

// frames takes in every whole frame of buf.
func (w *observedWatch) frames() {
	for !w.failed {
		var frame []byte
		if w.protobuf {
			if len(w.buf) < 4 {
				return
			}
			size := int(binary.BigEndian.Uint32(w.buf))
			if size > maxObserved {
				w.fail(unobservedTooLarge, fmt.Errorf("a frame of %d bytes", size))
				return
			}
			if len(w.buf) < 4+size {
				return
			}
			frame, w.buf = w.buf[4:4+size], w.buf[4+size:]
		} else {
			i := bytes.IndexByte(w.buf, '\n')
			if i < 0 {
				if len(w.buf) > maxObserved {
					w.fail(unobservedTooLarge, errors.New("a line past the endpoint's bound"))
				}
				return
			}
			frame, w.buf = w.buf[:i], w.buf[i+1:]
			if len(bytes.TrimSpace(frame)) == 0 {
				continue
			}
		}
		if err := w.event(frame); err != nil {
			w.fail(unobservedUndecodable, err)
			return
		}
	}
	if len(w.buf) == 0 {
		w.buf = nil // the array of a large frame goes
	}
}

// event takes in one frame: an event of the watch.
func (w *observedWatch) event(frame []byte) error {
	var ev metav1.WatchEvent
	if _, _, err := w.decoder.Decode(frame, nil, &ev); err != nil {
		return fmt.Errorf("a watch event: %w", err)
	}
	switch watch.EventType(ev.Type) {
	case watch.Added, watch.Modified, watch.Deleted:
	case watch.Bookmark:
		w.view.heard()
		return nil
	default:
		return nil
	}
	obj, err := runtime.Decode(deserializer, ev.Object.Raw)
	if err != nil {
		return fmt.Errorf("the object of a watch event: %w", err)
	}
	return w.view.observeObject(watch.EventType(ev.Type), obj)
}

func (w *observedWatch) fail(reason string, err error) {
	w.failed, w.buf = true, nil
	w.once.Do(func() {
		w.view.distrust(reason, fmt.Errorf("kube-apiserver's watch of %s: %w", w.r.viewType().Resource, err))
	})
}

// observeHubList takes in a list the hub answered r with, in place of
// the copy (a bulk get: a list whatever r's verb).
func (f *viewFollower) observeHubList(r *copyRead, list runtime.Object) {
	if err := f.observeList(r, list); err != nil {
		f.distrust(unobservedUndecodable, fmt.Errorf("the hub's answer to a %s of %s: %w", r.verb, r.viewType().Resource, err))
	}
}

// observeHubEvent takes in an event of a hub channel served in place of
// the copy.
func (f *viewFollower) observeHubEvent(ev watchmux.Event) {
	switch ev.Type {
	case watch.Added, watch.Modified, watch.Deleted:
	default:
		return
	}
	obj, err := runtime.Decode(deserializer, ev.Object)
	if err == nil {
		err = f.observeObject(ev.Type, obj)
	}
	if err != nil {
		f.distrust(unobservedUndecodable, fmt.Errorf("an event of a hub channel: %w", err))
	}
}
