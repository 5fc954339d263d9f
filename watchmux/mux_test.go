package watchmux

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// testHandler does what the selector's resource names, so one server
// serves every case:
//
//	refuse      403
//	count-N     N ADDED events {"n":i}, then nothing
//	initial-N-L an initial state of N ADDED events {"n":i} and its
//	            closing bookmark, then L ADDED events {"live":i}
//	patient-N   N ADDED events {"n":i}, each after WaitRoom
//	flood       events until the channel is closed under it
//	revoke      one ADDED, then ERROR 403
//	hold        Open waits until release is closed
//	slow        Open counts itself in entered, then waits until release
//	            is closed, as an open waiting on a SubjectAccessReview
//	progress    the initial state's bookmark, then a BOOKMARK answering
//	            each progress request, annotated with its token
type testHandler struct {
	release chan struct{}
	entered atomic.Int64
}

func (h *testHandler) Open(ctx context.Context, sel *v1alpha1.GetOperation, sink Sink) (func(), *metav1.Status) {
	name := sel.Resource.Resource
	switch {
	case name == "refuse":
		return nil, &metav1.Status{Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: "not yours"}
	case name == "slow":
		h.entered.Add(1)
		fallthrough
	case name == "hold":
		select {
		case <-h.release:
		case <-ctx.Done():
		}
		return func() {}, nil
	case strings.HasPrefix(name, "count-"):
		n, _ := strconv.Atoi(strings.TrimPrefix(name, "count-"))
		return func() {
			for i := range n {
				if !sink.Send(watch.Added, fmt.Appendf(nil, `{"n":%d}`, i)) {
					return
				}
			}
		}, nil
	case strings.HasPrefix(name, "initial-"):
		var n, l int
		fmt.Sscanf(name, "initial-%d-%d", &n, &l)
		return func() {
			for i := range n {
				if !sink.Initial(watch.Added, fmt.Appendf(nil, `{"n":%d}`, i)) {
					return
				}
			}
			sink.Initial(watch.Bookmark, fmt.Appendf(nil, `{"metadata":{"resourceVersion":"%d","annotations":{%q:"true"}}}`, n, metav1.InitialEventsAnnotationKey))
			for i := range l {
				if !sink.Send(watch.Added, fmt.Appendf(nil, `{"live":%d}`, i)) {
					return
				}
			}
		}, nil
	case strings.HasPrefix(name, "patient-"):
		n, _ := strconv.Atoi(strings.TrimPrefix(name, "patient-"))
		return func() {
			for i := range n {
				if !sink.(*channel).WaitRoom() || !sink.Send(watch.Added, fmt.Appendf(nil, `{"n":%d}`, i)) {
					return
				}
			}
		}, nil
	case name == "flood":
		object := []byte(`{"data":"` + strings.Repeat("x", 4096) + `"}`)
		return func() {
			for sink.Send(watch.Modified, object) {
			}
		}, nil
	case name == "progress":
		n := 0 // the requests come one at a time, on the reader
		sink.(ProgressSink).OnProgress(func(token string) {
			n++
			sink.Send(watch.Bookmark, fmt.Appendf(nil, `{"metadata":{"resourceVersion":"p%d","annotations":{%q:%q}}}`, n, v1alpha1.NodeViewProgressAnnotation, token))
		})
		return func() {
			sink.Initial(watch.Bookmark, fmt.Appendf(nil, `{"metadata":{"resourceVersion":"p0","annotations":{%q:"true"}}}`, metav1.InitialEventsAnnotationKey))
		}, nil
	case name == "revoke":
		return func() {
			sink.Send(watch.Added, []byte(`{"n":0}`))
			sink.Close(&metav1.Status{Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: "access lost"})
		}, nil
	}
	return nil, &metav1.Status{Code: http.StatusBadRequest, Message: "unknown test selector " + name}
}

func startServer(t testing.TB, o Options) (*Server, *httptest.Server, *testHandler) {
	t.Helper()
	h := &testHandler{release: make(chan struct{})}
	srv := NewServer(h, o)
	hs := httptest.NewTLSServer(srv)
	t.Cleanup(func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
		_ = srv.Shutdown(context.Background())
		hs.Close()
	})
	return srv, hs, h
}

func dial(t *testing.T, hs *httptest.Server) *Client {
	t.Helper()
	c, err := Dial(context.Background(), restConfigFor(hs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// restConfigFor points a client at hs, trusting its certificate.
func restConfigFor(hs *httptest.Server) *rest.Config {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hs.Certificate().Raw})
	return &rest.Config{Host: hs.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
}

func tlsFor(hs *httptest.Server) *tls.Config {
	return hs.Client().Transport.(*http.Transport).TLSClientConfig
}

func sel(resource string) v1alpha1.GetOperation {
	return v1alpha1.GetOperation{Resource: metav1.GroupVersionResource{Version: "v1", Resource: resource}}
}

func next(t *testing.T, ch *Channel) (Event, bool) {
	t.Helper()
	select {
	case ev, ok := <-ch.Events:
		return ev, ok
	case <-time.After(10 * time.Second):
		t.Fatalf("channel %d: no event within 10s", ch.ID)
		return Event{}, false
	}
}

func TestChannelsCarryTheirEventsInOrder(t *testing.T) {
	_, hs, _ := startServer(t, DefaultOptions())
	c := dial(t, hs)
	ctx := context.Background()
	a, err := c.Watch(ctx, sel("count-250"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Watch(ctx, sel("count-200"))
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == b.ID || a.ID == 0 || b.ID == 0 {
		t.Fatalf("channel ids %d and %d", a.ID, b.ID)
	}
	for _, tc := range []struct {
		ch *Channel
		n  int
	}{{a, 250}, {b, 200}} {
		for i := range tc.n {
			ev, ok := next(t, tc.ch)
			if !ok || ev.Type != watch.Added || string(ev.Object) != fmt.Sprintf(`{"n":%d}`, i) {
				t.Fatalf("channel %d event %d: %v %s (open %v)", tc.ch.ID, i, ev.Type, ev.Object, ok)
			}
		}
	}
}

// TestClientClosesAChannelItsConsumerDoesNotRead: the consumer of one
// channel reads nothing; that channel ends with ERROR 410 after
// ClientEventBuffer events, and the connection goes on serving.
func TestClientClosesAChannelItsConsumerDoesNotRead(t *testing.T) {
	_, hs, _ := startServer(t, DefaultOptions())
	c := dial(t, hs)
	ctx := context.Background()
	lazy, err := c.Watch(ctx, sel("count-1000"))
	if err != nil {
		t.Fatal(err)
	}
	busy, err := c.Watch(ctx, sel("count-1"))
	if err != nil {
		t.Fatalf("a new watch behind an unread channel: %v", err)
	}
	if ev, _ := next(t, busy); ev.Type != watch.Added {
		t.Fatalf("the read channel: %+v", ev)
	}
	// The 1000 events arrive within milliseconds; give them a second
	// before reading any.
	time.Sleep(time.Second)
	for n := 0; ; n++ {
		ev, open := next(t, lazy)
		if !open {
			t.Fatalf("the unread channel closed after %d events without an ERROR", n)
		}
		if ev.Type == watch.Error {
			if ev.Status.Code != http.StatusGone || n != ClientEventBuffer {
				t.Fatalf("after %d events: %+v", n, ev.Status)
			}
			return
		}
	}
}

func TestRefusalLeavesOtherChannelsAlone(t *testing.T) {
	_, hs, _ := startServer(t, DefaultOptions())
	c := dial(t, hs)
	ctx := context.Background()
	a, err := c.Watch(ctx, sel("count-1"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Watch(ctx, sel("refuse"))
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "not yours") {
		t.Fatalf("refused watch: %v", err)
	}
	if ev, ok := next(t, a); !ok || ev.Type != watch.Added {
		t.Fatalf("the other channel: %v %v", ev, ok)
	}
	b, err := c.Watch(ctx, sel("count-1"))
	if err != nil || b.ID <= a.ID {
		t.Fatalf("after a refusal: %v, %v", b, err)
	}
}

func TestServerClosesAChannelWithAnError(t *testing.T) {
	_, hs, _ := startServer(t, DefaultOptions())
	c := dial(t, hs)
	ch, err := c.Watch(context.Background(), sel("revoke"))
	if err != nil {
		t.Fatal(err)
	}
	// The ADDED may or may not come first: events still queued when a
	// channel closes are dropped (the client resumes from the last
	// resourceVersion it saw).
	ev, _ := next(t, ch)
	if ev.Type == watch.Added {
		ev, _ = next(t, ch)
	}
	if ev.Type != watch.Error || ev.Status == nil || ev.Status.Code != http.StatusForbidden || ev.Status.Message != "access lost" {
		t.Fatalf("want ERROR 403: %+v", ev)
	}
	if _, open := next(t, ch); open {
		t.Fatal("events after ERROR")
	}
	if _, err := c.Watch(context.Background(), sel("count-1")); err != nil {
		t.Fatalf("the connection did not survive: %v", err)
	}
}

func TestCloseWatch(t *testing.T) {
	_, hs, _ := startServer(t, DefaultOptions())
	c := dial(t, hs)
	ctx := context.Background()
	ch, err := c.Watch(ctx, sel("count-5"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWatch(ctx, ch); err != nil {
		t.Fatal(err)
	}
	for { // buffered events, then closed
		if _, open := next(t, ch); !open {
			break
		}
	}
	err = c.CloseWatch(ctx, ch)
	if !apierrors.IsNotFound(err) {
		t.Fatalf("closing a closed channel: %v", err)
	}
	err = c.CloseWatch(ctx, &Channel{ID: 9999})
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "channel 9999 is not open") {
		t.Fatalf("closing a channel never opened: %v", err)
	}
}

// TestSlowChannelIsClosedAlone: a client that does not read makes the
// flooding channel overflow; it gets ERROR 410 and closes, while a quiet
// channel on the same connection stays open.
func TestSlowChannelIsClosedAlone(t *testing.T) {
	o := DefaultOptions()
	o.ChannelQueue = 64
	_, hs, _ := startServer(t, o)
	ws := rawDial(t, hs)
	send(t, ws, `{"id":1,"watch":{"selector":{"resource":{"version":"v1","resource":"count-1"}}}}`)
	send(t, ws, `{"id":2,"watch":{"selector":{"resource":{"version":"v1","resource":"flood"}}}}`)
	// Read nothing for a while: the flood fills the socket buffers, then
	// the channel's queue.
	time.Sleep(2 * time.Second)
	channels := map[int64]int64{}
	var floodErr *metav1.Status
	deadline := time.Now().Add(30 * time.Second)
	for (floodErr == nil || len(channels) < 2) && time.Now().Before(deadline) {
		msg := read(t, ws)
		if msg.Response != nil {
			channels[msg.Response.RequestID] = msg.Response.Channel
			continue
		}
		if msg.Type == watch.Error {
			if msg.Channel == channels[1] {
				t.Fatalf("ERROR on channel %d, not the flooding one: %s", msg.Channel, msg.Object)
			}
			floodErr = &metav1.Status{}
			if err := json.Unmarshal(msg.Object, floodErr); err != nil {
				t.Fatal(err)
			}
		}
	}
	if floodErr == nil || floodErr.Code != http.StatusGone || !strings.Contains(floodErr.Message, "too slow") {
		t.Fatalf("the flooding channel was not closed with 410: %+v", floodErr)
	}
	// The quiet channel is still open: closing it succeeds.
	send(t, ws, fmt.Sprintf(`{"id":3,"closeWatch":{"channel":%d}}`, channels[1]))
	for {
		msg := read(t, ws)
		if msg.Response != nil && msg.Response.RequestID == 3 {
			if msg.Response.Error != nil {
				t.Fatalf("the quiet channel was closed too: %v", msg.Response.Error.Message)
			}
			break
		}
	}
}

func TestBadInput(t *testing.T) {
	o := DefaultOptions()
	o.ReadLimit = 1024
	_, hs, _ := startServer(t, o)
	ws := rawDial(t, hs)
	for _, tc := range []struct {
		name, msg string
		id        int64
		want      string
	}{
		{"not JSON", `{"id":`, 0, "not a request"},
		{"unknown field", `{"id":4,"watch":{"selector":{}},"extra":1}`, 4, "unknown field"},
		{"both", `{"id":5,"watch":{"selector":{}},"closeWatch":{"channel":1}}`, 5, "not several"},
		{"neither", `{"id":6}`, 6, "one of watch, closeWatch and progress"},
		{"two requests in one message", `{"id":7,"closeWatch":{"channel":1}} {"id":8}`, 7, "one JSON request per message"},
		{"someone else's channel", `{"id":9,"closeWatch":{"channel":12345}}`, 9, "not open on this connection"},
		{"progress of someone else's channel", `{"id":10,"progress":{"channel":12345,"token":"t"}}`, 10, "not open on this connection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			send(t, ws, tc.msg)
			msg := read(t, ws)
			if msg.Response == nil || msg.Response.RequestID != tc.id || msg.Response.Error == nil || !strings.Contains(msg.Response.Error.Message, tc.want) {
				t.Fatalf("got %+v, want an error response to %d saying %q", msg.Response, tc.id, tc.want)
			}
			if msg.Response.Error.Kind != "Status" || msg.Response.Error.Code == 0 {
				t.Errorf("the error is not a full Status: %+v", msg.Response.Error)
			}
		})
	}
	t.Run("binary", func(t *testing.T) {
		if err := ws.WriteMessage(websocket.BinaryMessage, []byte{1, 2, 3}); err != nil {
			t.Fatal(err)
		}
		msg := read(t, ws)
		if msg.Response == nil || msg.Response.Error == nil || !strings.Contains(msg.Response.Error.Message, "binary") {
			t.Fatalf("got %+v", msg.Response)
		}
	})
	t.Run("oversized ends the connection with 1009", func(t *testing.T) {
		send(t, ws, `{"id":1,"watch":{"selector":{"namespace":"`+strings.Repeat("x", 2048)+`"}}}`)
		_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _, err := ws.ReadMessage()
		if !websocket.IsCloseError(err, websocket.CloseMessageTooBig) {
			t.Fatalf("got %v, want close 1009", err)
		}
	})
	// Other connections are unaffected.
	c := dial(t, hs)
	if _, err := c.Watch(context.Background(), sel("count-1")); err != nil {
		t.Fatal(err)
	}
}

func TestLimits(t *testing.T) {
	o := DefaultOptions()
	o.MaxPending, o.MaxChannels = 2, 3
	_, hs, h := startServer(t, o)
	ws := rawDial(t, hs)
	for id := 1; id <= 3; id++ {
		send(t, ws, fmt.Sprintf(`{"id":%d,"watch":{"selector":{"resource":{"version":"v1","resource":"hold"}}}}`, id))
	}
	msg := read(t, ws)
	if msg.Response == nil || msg.Response.RequestID != 3 || msg.Response.Error == nil || msg.Response.Error.Code != http.StatusTooManyRequests {
		t.Fatalf("third request while two are pending: %+v", msg.Response)
	}
	close(h.release)
	for range 2 {
		if msg := read(t, ws); msg.Response == nil || msg.Response.Error != nil {
			t.Fatalf("held request: %+v", msg.Response)
		}
	}
	send(t, ws, `{"id":4,"watch":{"selector":{"resource":{"version":"v1","resource":"hold"}}}}`)
	if msg := read(t, ws); msg.Response == nil || msg.Response.Error != nil {
		t.Fatalf("third channel: %+v", msg.Response)
	}
	send(t, ws, `{"id":5,"watch":{"selector":{"resource":{"version":"v1","resource":"hold"}}}}`)
	msg = read(t, ws)
	if msg.Response == nil || msg.Response.Error == nil || msg.Response.Error.Code != http.StatusTooManyRequests || !strings.Contains(msg.Response.Error.Message, "channels open") {
		t.Fatalf("fourth channel: %+v", msg.Response)
	}
}

func TestShutdownClosesChannelsThenTheConnection(t *testing.T) {
	srv, hs, _ := startServer(t, DefaultOptions())
	c := dial(t, hs)
	ch, err := c.Watch(context.Background(), sel("count-0"))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Shutdown(context.Background()) }()
	ev, _ := next(t, ch)
	if ev.Type != watch.Error || ev.Status.Code != http.StatusServiceUnavailable {
		t.Fatalf("want ERROR 503, got %+v", ev)
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("connection still open after shutdown")
	}
	if !websocket.IsCloseError(c.Err(), websocket.CloseGoingAway) {
		t.Errorf("connection ended with %v, want close 1001 (going away)", c.Err())
	}
	// A connection after shutdown is upgraded and closed at once with
	// 1013 (try again later).
	late, err := Dial(context.Background(), restConfigFor(hs))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-late.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a connection after shutdown stayed open")
	}
	if !websocket.IsCloseError(late.Err(), websocket.CloseTryAgainLater) {
		t.Errorf("a connection after shutdown ended with %v, want close 1013", late.Err())
	}
}

func TestUpgradeNeedsTheSubprotocol(t *testing.T) {
	_, hs, _ := startServer(t, DefaultOptions())
	d := websocket.Dialer{TLSClientConfig: tlsFor(hs)}
	_, resp, err := d.Dial("wss"+strings.TrimPrefix(hs.URL, "https")+Path+"?watch=1", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("upgrade without subprotocol: %v, %v", resp, err)
	}
}

func rawDial(t *testing.T, hs *httptest.Server) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{TLSClientConfig: tlsFor(hs), Subprotocols: []string{v1alpha1.WatchSubprotocol}}
	ws, _, err := d.Dial("wss"+strings.TrimPrefix(hs.URL, "https")+Path+"?watch=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return ws
}

func send(t testing.TB, ws *websocket.Conn, msg string) {
	t.Helper()
	if err := ws.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		t.Fatal(err)
	}
}

func read(t testing.TB, ws *websocket.Conn) v1alpha1.ServerMessage {
	t.Helper()
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, data, err := ws.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	var msg v1alpha1.ServerMessage
	if err := json.Unmarshal(data, &msg); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
	return msg
}

// TestKeepalive: a client that answers pings stays connected across many
// ping intervals without sending anything else; one that reads but never
// answers is disconnected.
func TestKeepalive(t *testing.T) {
	o := DefaultOptions()
	o.PingInterval = 50 * time.Millisecond
	_, hs, _ := startServer(t, o)

	live := rawDial(t, hs) // gorilla answers pings while it reads
	dead := rawDial(t, hs)
	dead.SetPingHandler(func(string) error { return nil })
	liveErr, deadErr := make(chan error, 1), make(chan error, 1)
	readUntilError := func(ws *websocket.Conn, errs chan<- error) {
		for {
			if _, _, err := ws.ReadMessage(); err != nil {
				errs <- err
				return
			}
		}
	}
	go readUntilError(live, liveErr)
	go readUntilError(dead, deadErr)

	select {
	case err := <-deadErr:
		t.Logf("silent client disconnected: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("a client that never answered a ping was still connected after 10s (200 ping intervals)")
	}
	// By now the live client has been pinged at least twice over.
	select {
	case err := <-liveErr:
		t.Fatalf("a client answering pings was disconnected: %v", err)
	default:
	}
	send(t, live, `{"id":1,"watch":{"selector":{"resource":{"version":"v1","resource":"count-0"}}}}`)
	select {
	case err := <-liveErr:
		t.Fatalf("a client answering pings was disconnected: %v", err)
	case <-time.After(3 * o.PingInterval):
	}
}

// TestClientNoticesASilentServer: a server that stops sending anything,
// pings included, as one whose node is lost does, ends the client's
// connection within its idle timeout; a live server's pings keep it.
func TestClientNoticesASilentServer(t *testing.T) {
	upgrader := websocket.Upgrader{Subprotocols: []string{v1alpha1.WatchSubprotocol}}
	silent := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		<-r.Context().Done() // says nothing, closes nothing
	}))
	defer silent.Close()
	c, err := Dial(context.Background(), restConfigFor(silent), WithIdleTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
		t.Logf("silent server noticed: %v", c.Err())
	case <-time.After(10 * time.Second):
		t.Fatal("the connection to a silent server was still up after 10s (50 idle timeouts)")
	}

	// A pinging server's connection outlives its idle timeouts. Each side
	// hears from the other every second (the server's pings and the
	// client's pongs) and gives up after two (the server) or four (the
	// client): a loaded machine (this runs with -race
	// beside other packages' tests) can stall a goroutine for a few
	// hundred milliseconds, which is not the silence this is about.
	o := DefaultOptions()
	o.PingInterval = time.Second
	_, live, _ := startServer(t, o)
	lc, err := Dial(context.Background(), restConfigFor(live), WithIdleTimeout(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	select {
	case <-lc.Done():
		t.Fatalf("a pinging server's connection ended: %v", lc.Err())
	case <-time.After(6 * time.Second):
	}
}
