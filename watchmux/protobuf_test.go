package watchmux

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// protobufSecret is s as kube-apiserver encodes it in protobuf.
func protobufSecret(s *corev1.Secret) []byte {
	s = s.DeepCopy()
	s.APIVersion, s.Kind = "v1", "Secret"
	var b bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(s, &b); err != nil {
		panic(err)
	}
	return b.Bytes()
}

func decodeProtobufSecret(t *testing.T, b []byte) *corev1.Secret {
	t.Helper()
	obj, _, err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Decode(b, nil, nil)
	if err != nil {
		t.Fatalf("not a protobuf object: %v", err)
	}
	s, ok := obj.(*corev1.Secret)
	if !ok {
		t.Fatalf("decoded a %T", obj)
	}
	return s
}

// encodedHandler serves one channel per Open: a Secret at
// resourceVersion 7 in the encoding the channel asked for, then a JSON
// BOOKMARK, as the hub sends bookmarks.
type encodedHandler struct{}

func (encodedHandler) Open(_ context.Context, _ *v1alpha1.GetOperation, sink Sink) (func(), *metav1.Status) {
	return func() {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x", ResourceVersion: "7"}, Data: map[string][]byte{"k": []byte("v")}}
		object, _ := json.Marshal(s)
		if sink.Protobuf() {
			object = protobufSecret(s)
		}
		sink.Send(watch.Modified, object)
		sink.Send(watch.Bookmark, []byte(`{"kind":"Secret","apiVersion":"v1","metadata":{"resourceVersion":"8"}}`))
	}, nil
}

// startEncodedServer serves encodedHandler; with jsonOnly, its upgrader
// offers only WatchSubprotocol, as a hub older than
// WatchSubprotocolProtobuf does (it then also refuses contentType, as
// such a hub refuses any field it does not know).
func startEncodedServer(t *testing.T, jsonOnly bool) *Client {
	t.Helper()
	srv := NewServer(encodedHandler{}, DefaultOptions())
	if jsonOnly {
		srv.upgrader.Subprotocols = []string{v1alpha1.WatchSubprotocol}
	}
	hs := newTLSServer(t, srv)
	return dial(t, hs)
}

// TestChannelGetsProtobufObjectsWhenItAsks: on a connection of
// WatchSubprotocolProtobuf, a channel opened InProtobuf gets its objects
// as kube-apiserver's protobuf, and what the server has only as JSON (a
// bookmark) as JSON; a channel that did not ask, on the same connection,
// gets JSON only.
func TestChannelGetsProtobufObjectsWhenItAsks(t *testing.T) {
	c := startEncodedServer(t, false)
	ch, err := c.Watch(context.Background(), sel("secrets"), InProtobuf())
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := next(t, ch)
	if ev.Type != watch.Modified || ev.Object != nil || !bytes.HasPrefix(ev.Protobuf, []byte("k8s\x00")) {
		t.Fatalf("first event %s, JSON %q, protobuf %q; want MODIFIED in protobuf", ev.Type, ev.Object, ev.Protobuf)
	}
	if s := decodeProtobufSecret(t, ev.Protobuf); s.ResourceVersion != "7" || string(s.Data["k"]) != "v" {
		t.Errorf("decoded %+v", s)
	}
	ev, _ = next(t, ch)
	if ev.Type != watch.Bookmark || ev.Protobuf != nil || !json.Valid(ev.Object) {
		t.Errorf("second event %s, JSON %q, protobuf %q; want a JSON BOOKMARK", ev.Type, ev.Object, ev.Protobuf)
	}

	plain, err := c.Watch(context.Background(), sel("secrets"))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if ev, _ := next(t, plain); ev.Protobuf != nil || !json.Valid(ev.Object) {
			t.Errorf("a channel that did not ask: %s with protobuf %q, JSON %q", ev.Type, ev.Protobuf, ev.Object)
		}
	}
}

// TestNewClientOfAnOlderServerGetsJSON: against a server that speaks
// WatchSubprotocol only, a channel opened InProtobuf opens (the client
// does not send contentType, which such a server refuses) and gets JSON.
func TestNewClientOfAnOlderServerGetsJSON(t *testing.T) {
	c := startEncodedServer(t, true)
	ch, err := c.Watch(context.Background(), sel("secrets"), InProtobuf())
	if err != nil {
		t.Fatalf("open InProtobuf on an older server: %v", err)
	}
	for range 2 {
		if ev, _ := next(t, ch); ev.Protobuf != nil || !json.Valid(ev.Object) {
			t.Errorf("%s with protobuf %q, JSON %q; want JSON", ev.Type, ev.Protobuf, ev.Object)
		}
	}
}

// TestOlderClientOfANewServerGetsJSON: a client that offers only
// WatchSubprotocol (one older than WatchSubprotocolProtobuf) is answered
// in it, with text messages only, and a contentType of protobuf on such
// a connection is refused with 400.
func TestOlderClientOfANewServerGetsJSON(t *testing.T) {
	hs := newTLSServer(t, NewServer(encodedHandler{}, DefaultOptions()))
	ws := rawDial(t, hs)
	if ws.Subprotocol() != v1alpha1.WatchSubprotocol {
		t.Fatalf("subprotocol %q, want %q", ws.Subprotocol(), v1alpha1.WatchSubprotocol)
	}
	send(t, ws, `{"id":1,"watch":{"selector":{"resource":{"version":"v1","resource":"secrets"}},"contentType":"application/vnd.kubernetes.protobuf"}}`)
	if msg := read(t, ws); msg.Response == nil || msg.Response.Error == nil || msg.Response.Error.Code != http.StatusBadRequest ||
		!strings.Contains(msg.Response.Error.Message, v1alpha1.WatchSubprotocolProtobuf) {
		t.Fatalf("contentType protobuf on a JSON connection: %+v, want 400 naming the subprotocol", msg.Response)
	}
	send(t, ws, `{"id":2,"watch":{"selector":{"resource":{"version":"v1","resource":"secrets"}}}}`)
	for i := range 3 {
		kind, data, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if kind != websocket.TextMessage || !json.Valid(data) {
			t.Fatalf("message %d: kind %d, %q; want JSON text", i, kind, data)
		}
	}
}

// TestContentTypeIsJSONOrProtobuf: any other contentType is refused with
// 400, and the connection stays.
func TestContentTypeIsJSONOrProtobuf(t *testing.T) {
	c := startEncodedServer(t, false)
	w := &v1alpha1.Watch{Selector: sel("secrets"), ContentType: "application/yaml"}
	_, err := c.request(context.Background(), v1alpha1.WatchRequest{Watch: w})
	if !apierrors.IsBadRequest(err) {
		t.Fatalf("contentType application/yaml: %v, want 400", err)
	}
	w.ContentType = runtime.ContentTypeJSON
	if _, err := c.request(context.Background(), v1alpha1.WatchRequest{Watch: w}); err != nil {
		t.Fatalf("contentType application/json: %v", err)
	}
}

// TestProtobufMetaReadsWhatJSONMetaReads: the session's resume point and
// initial-events-end mark are read alike from both encodings.
func TestProtobufMetaReadsWhatJSONMetaReads(t *testing.T) {
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns", ResourceVersion: "12345", Labels: map[string]string{"a": "b"}},
			Data: map[string][]byte{"k": bytes.Repeat([]byte("v"), 300)}},
		{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "9", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true", "other": "x"}}},
		{},
	} {
		var fromJSON meta
		raw, _ := json.Marshal(s)
		if err := json.Unmarshal(raw, &fromJSON); err != nil {
			t.Fatal(err)
		}
		fromProtobuf, err := protobufMeta(protobufSecret(s))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fromProtobuf, fromJSON) {
			t.Errorf("protobuf %+v, JSON %+v", fromProtobuf, fromJSON)
		}
	}
	for _, bad := range [][]byte{nil, []byte("{}"), []byte("k8s\x00\x12\xff")} {
		if _, err := protobufMeta(bad); err == nil {
			t.Errorf("%q read without an error", bad)
		}
	}
}

// newTLSServer serves srv over TLS until the test ends.
func newTLSServer(t *testing.T, srv *Server) *httptest.Server {
	t.Helper()
	hs := httptest.NewTLSServer(srv)
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		hs.Close()
	})
	return hs
}
