package watchmux

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// Handler opens channels. watchmux knows nothing of what a selector means
// or who may watch it: that is the handler's.
type Handler interface {
	// Open decides a Watch request. ctx is the channel's: it carries what
	// the upgrade request's context carried (the user), and ends when the
	// channel closes. To refuse, Open returns the status the client gets
	// in the response. Otherwise it returns run (or nil), which the
	// connection starts on its own goroutine once the response is queued,
	// typically to send the initial state and hand the channel to whatever
	// feeds it. Open may call sink.OnClose and sink.Close (a channel closed
	// before it is announced gets its response, then its ERROR), and
	// OnProgress if sink is a ProgressSink (it is on a Server), not
	// Send or Initial.
	Open(ctx context.Context, sel *v1alpha1.GetOperation, sink Sink) (run func(), refused *metav1.Status)
}

// Server upgrades bulk watch requests to websockets and serves them.
type Server struct {
	handler  Handler
	opts     Options
	upgrader websocket.Upgrader

	mu       sync.Mutex
	conns    map[*conn]struct{} // guarded by mu
	shutdown bool               // guarded by mu
	// active counts connections being served: Shutdown waits for it.
	active sync.WaitGroup
}

// NewServer serves channels opened by h, with the limits of o.
func NewServer(h Handler, o Options) *Server {
	RegisterMetrics()
	return &Server{
		handler: h,
		opts:    o,
		conns:   map[*conn]struct{}{},
		upgrader: websocket.Upgrader{
			// In the server's order of preference: gorilla picks the
			// client's first that is here, and a client offers
			// protobuf first.
			Subprotocols: []string{v1alpha1.WatchSubprotocolProtobuf, v1alpha1.WatchSubprotocol},
			// Authentication and authorization happened before the
			// request got here, on the request itself; a browser's
			// cross-origin request carries no client certificate or
			// token the server would accept.
			CheckOrigin: func(*http.Request) bool { return true },
			// A client sends little (channel opens and closes, progress
			// requests): a read buffer of its own, smaller than the HTTP
			// server's 4 KiB that gorilla would otherwise keep, which a
			// connection served detached then lets go of.
			ReadBufferSize: 1024,
			// A connection holds a write buffer only while it writes a
			// message: most connections are idle most of the time (a
			// node's view between its pods' changes), and without a pool
			// each would keep the 4 KiB buffer the upgrade hijacked for
			// as long as it lives.
			WriteBufferPool: &messageBuffers,
		},
	}
}

// messageBuffers are the write buffers of every connection's messages
// (websocket.Upgrader.WriteBufferPool); one pool, as gorilla asks, since
// every connection's buffers have one size.
var messageBuffers sync.Pool

// IsUpgrade reports whether r asks for a bulk watch: a websocket upgrade
// with watch=1 (or true).
func IsUpgrade(r *http.Request) bool {
	w := r.URL.Query().Get("watch")
	return (w == "1" || w == "true") && websocket.IsWebSocketUpgrade(r)
}

// ServeHTTP upgrades r and serves the connection until it ends. The
// caller has authenticated and authorized r.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c := s.upgrade(r.Context(), w, r); c != nil {
		s.run(c, nil)
	}
}

// ServeDetached upgrades r and serves the connection on a goroutine of
// its own, under ctx instead of r's context, and returns once the
// upgrade is done; done is called when the connection has ended. When
// end yields a status, every channel ends with it as its ERROR and the
// connection closes once they are written (as Shutdown closes it; with
// an ERROR 503 the client resumes its channels on another connection).
// The hub ends a connection whose credential no longer authenticates
// (401), or that has reached its maximum age (503).
//
// Served detached, a connection keeps nothing of the handler chain its
// request came through: the chain's goroutine, its copies of the
// request and their contexts, its audit and tracing state and the HTTP
// server's read buffer all go once the upgrade is done, where ServeHTTP
// holds them for the connection's life. ctx carries what the Handler
// reads (the caller, request.UserFrom) and nothing else.
func (s *Server) ServeDetached(ctx context.Context, w http.ResponseWriter, r *http.Request, end <-chan *metav1.Status, done func()) {
	c := s.upgrade(ctx, w, r)
	if c == nil {
		done()
		return
	}
	go func() {
		defer done()
		s.run(c, end)
	}()
}

// upgrade answers r with the websocket upgrade and registers the
// connection, counted in active; nil when r is refused (answered) or the
// server is shutting down (the connection closed with a close frame).
func (s *Server) upgrade(ctx context.Context, w http.ResponseWriter, r *http.Request) *conn {
	if !websocket.IsWebSocketUpgrade(r) {
		http.Error(w, "a bulk watch is a websocket upgrade with subprotocol "+v1alpha1.WatchSubprotocol, http.StatusBadRequest)
		return nil
	}
	if !hasSubprotocol(r) {
		http.Error(w, "subprotocol "+v1alpha1.WatchSubprotocol+" is required", http.StatusBadRequest)
		return nil
	}
	hijacker := &batchingHijacker{ResponseWriter: w}
	ws, err := s.upgrader.Upgrade(hijacker, r, nil)
	if err != nil {
		return nil // the upgrader answered the client
	}
	c := newConn(ctx, ws, s.handler, s.opts, &counters{
		channels: channelsGauge, requests: requestsTotal, closed: closedTotal,
		written: framesTotal, batch: batchFrames, writeTimeouts: writeTimeoutsTotal,
	})
	c.batch = hijacker.conn
	c.protobuf = ws.Subprotocol() == v1alpha1.WatchSubprotocolProtobuf
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		msg := websocket.FormatCloseMessage(websocket.CloseTryAgainLater, "server shutting down; resubscribe elsewhere")
		_ = ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(s.opts.WriteTimeout))
		ws.Close()
		return nil
	}
	s.conns[c] = struct{}{}
	s.active.Add(1)
	klog.V(4).InfoS("Bulk watch connection opened", "remote", r.RemoteAddr)
	return c
}

// run serves c, which upgrade registered, until it ends.
func (s *Server) run(c *conn, end <-chan *metav1.Status) {
	defer s.active.Done()
	connectionsGauge.Inc()
	if end != nil {
		go func() {
			select {
			case st := <-end:
				c.end(st)
			case <-c.ctx.Done():
			}
		}()
	}
	c.serve()
	connectionsGauge.Dec()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

func hasSubprotocol(r *http.Request) bool {
	for _, p := range websocket.Subprotocols(r) {
		if p == v1alpha1.WatchSubprotocol || p == v1alpha1.WatchSubprotocolProtobuf {
			return true
		}
	}
	return false
}

// Shutdown closes every channel with ERROR 503 and every connection with
// a close frame (going away) once its ERRORs are written, refuses new
// connections, and waits until every connection has ended or ctx ends.
// Each connection ends within Options.DrainTimeout (its writer's last
// batch, the close frame, the client's answer to it, each bounded by
// WriteTimeout); a connection still open when ctx ends is closed without
// its close frame, counted in nodeproxy_watchmux_shutdown_connections_total.
// Before it waited for nothing, and a process that exited on return cut
// about one connection in twenty before its close frame (issue 14).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown = true
	for c := range s.conns {
		c.shutdown()
	}
	s.mu.Unlock()
	ended := make(chan struct{})
	go func() {
		s.active.Wait()
		close(ended)
	}()
	select {
	case <-ended:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	cut := len(s.conns)
	for c := range s.conns {
		c.fail(errDrainTimeout)
	}
	s.mu.Unlock()
	shutdownTotal.WithLabelValues("cut").Add(float64(cut))
	<-ended // fail closes the socket: every loop ends at once
	return fmt.Errorf("%d bulk watch connections still writing when the shutdown's time ran out: %w", cut, ctx.Err())
}

var errDrainTimeout = errors.New("shutdown: the connection did not finish writing in time")
