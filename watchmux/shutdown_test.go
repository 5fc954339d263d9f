package watchmux

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// exitingServer is a watch server whose process can "exit": cut closes
// every connection it ever accepted, hijacked ones included, as the end
// of the process does.
type exitingServer struct {
	*Server
	hs    *httptest.Server
	mu    sync.Mutex
	conns []net.Conn
}

func startExitingServer(t *testing.T, o Options) *exitingServer {
	t.Helper()
	h := &testHandler{release: make(chan struct{})}
	s := &exitingServer{Server: NewServer(h, o)}
	s.hs = httptest.NewUnstartedServer(s.Server)
	s.hs.Config.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
		}
	}
	s.hs.StartTLS()
	t.Cleanup(func() {
		close(h.release)
		s.cut()
		s.hs.Close()
	})
	return s
}

func (s *exitingServer) cut() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.Close()
	}
}

// TestShutdownWaitsForEveryCloseFrame: Shutdown returns once every
// connection's writer has written its ERRORs and the close frame 1001, so
// a process that exits right after it cuts none. Before, Shutdown returned
// at once and about one connection in twenty ended without its close
// frame (issue 14).
func TestShutdownWaitsForEveryCloseFrame(t *testing.T) {
	s := startExitingServer(t, DefaultOptions())
	ctx := context.Background()
	var clients []*Client
	var channels []*Channel
	for range 20 {
		c, err := Dial(ctx, restConfigFor(s.hs))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		// A queue for the writer to get through first.
		ch, err := c.Watch(ctx, sel("count-200"))
		if err != nil {
			t.Fatal(err)
		}
		clients, channels = append(clients, c), append(channels, ch)
	}
	sctx, cancel := context.WithTimeout(ctx, DefaultOptions().DrainTimeout())
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	s.cut() // the process exits
	for i, c := range clients {
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("client %d still connected after the server's end", i)
		}
		if !websocket.IsCloseError(c.Err(), websocket.CloseGoingAway) {
			t.Errorf("client %d ended with %v, want close 1001 (going away)", i, c.Err())
		}
		var last Event
		for ev := range channels[i].Events {
			last = ev
		}
		if last.Type != watch.Error || last.Status == nil || last.Status.Code != http.StatusServiceUnavailable {
			t.Errorf("client %d: last event %s %+v, want ERROR 503", i, last.Type, last.Status)
		}
	}
}

// TestShutdownSendsAStalledClientItsCloseFrame: a client that stopped
// reading, while what it was sent still fits in the socket's buffers,
// finds its events (those written before the shutdown), the ERROR 503
// and a close frame 1001 with a reason
// when it reads again, after the server is gone, rather than a bare EOF.
// Shutdown does not wait for its answer past the write timeout.
func TestShutdownSendsAStalledClientItsCloseFrame(t *testing.T) {
	o := DefaultOptions()
	o.WriteTimeout = 300 * time.Millisecond
	s := startExitingServer(t, o)
	d := websocket.Dialer{TLSClientConfig: s.hs.Client().Transport.(*http.Transport).TLSClientConfig, Subprotocols: []string{v1alpha1.WatchSubprotocol}}
	ws, _, err := d.Dial("wss"+strings.TrimPrefix(s.hs.URL, "https")+Path+"?watch=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	send(t, ws, `{"id":1,"watch":{"selector":{"resource":{"version":"v1","resource":"count-100"}}}}`)
	if msg := read(t, ws); msg.Response == nil || msg.Response.Error != nil {
		t.Fatalf("open: %+v", msg.Response)
	}
	// The client reads nothing more until the server is gone.
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		t.Fatalf("shutdown with a stalled client: %v", err)
	}
	s.cut()
	var events, errors int
	for {
		_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, data, err := ws.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if !websocket.IsCloseError(err, websocket.CloseGoingAway) {
				t.Fatalf("stalled client: connection ended with %v, want close 1001 (going away)", err)
			}
			if ce, _ = err.(*websocket.CloseError); ce == nil || ce.Text == "" {
				t.Errorf("close frame without a reason: %v", err)
			}
			break
		}
		switch {
		case strings.Contains(string(data), `"type":"ADDED"`):
			events++
		case strings.Contains(string(data), `"type":"ERROR"`) && strings.Contains(string(data), `"code":503`):
			errors++
		}
	}
	// Events still queued when the channel closed are dropped (the ERROR
	// is its last message), so some of the 100 may be missing.
	if events > 100 || errors != 1 {
		t.Errorf("stalled client read %d events and %d ERROR 503, want at most 100 and 1", events, errors)
	}
}
