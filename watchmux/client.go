package watchmux

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// Path is where the bulk watch is served, relative to a server's root.
const Path = "/apis/bulk.k8s.io/v1alpha1/bulkgetoperations"

// ClientEventBuffer is how many events a client channel holds for its
// consumer. A consumer that falls further behind gets ERROR 410 ("too
// slow") and the channel is closed, as the server closes a channel its
// client does not read: a slow consumer never holds back the other
// channels of the connection, nor the responses to new requests.
const ClientEventBuffer = 256

// Event is one event of a channel. For ERROR, Status says why the channel
// closed, and the Events channel closes after it.
type Event struct {
	Type watch.EventType
	// Object is the object as JSON, unless it came as Protobuf.
	Object json.RawMessage
	// Protobuf is the object as kube-apiserver encodes it in protobuf
	// ("k8s\x00", then a runtime.Unknown), on a channel opened
	// InProtobuf whose server sent it so; Object is then nil.
	Protobuf []byte
	Status   *metav1.Status
}

// Channel is one open watch.
type Channel struct {
	ID     int64
	Events <-chan Event
	events chan Event
	// initial, for a channel opened with sendInitialEvents, holds its
	// initial state for the consumer (client_initial.go); nil otherwise.
	initial *initialState
}

// Client is a bulk watch connection.
type Client struct {
	ws *websocket.Conn

	writeMu sync.Mutex // one writer at a time, as gorilla requires

	mu       sync.Mutex
	nextID   int64                 // guarded by mu
	pending  map[int64]chan result // guarded by mu
	kinds    map[int64]requestKind // guarded by mu: what each pending request asks
	channels map[int64]*Channel    // guarded by mu
	err      error                 // guarded by mu: why the connection ended
	done     chan struct{}

	// opening holds a slot per Watch request awaiting its answer; nil
	// for no bound (WithMaxOpening).
	opening chan struct{}

	// idleTimeout is how long the reader waits for anything from the
	// server; 0 forever.
	idleTimeout time.Duration

	// protobuf: the server speaks WatchSubprotocolProtobuf, so a channel
	// may ask for protobuf objects.
	protobuf bool
	// server is the address the connection went to, after redirects.
	server string
}

// Server is the address (scheme and host) the connection is to: the
// config's, or the replica a sharded hub redirected the upgrade to.
func (c *Client) Server() string { return c.server }

// extendDeadline gives the server another idleTimeout to be heard from.
// Only the reader calls it.
func (c *Client) extendDeadline() {
	if c.idleTimeout > 0 {
		_ = c.ws.SetReadDeadline(time.Now().Add(c.idleTimeout))
	}
}

// requestKind is what a request asks, which says what its response does
// to the client's channels.
type requestKind int

const (
	watchRequest        requestKind = iota // opens a channel
	initialWatchRequest                    // opens one with sendInitialEvents
	closeRequest                           // closes one
	progressRequest                        // changes none
)

func kindOf(req v1alpha1.WatchRequest) requestKind {
	switch {
	case req.Watch != nil:
		if si := req.Watch.Selector.Options.SendInitialEvents; si != nil && *si {
			return initialWatchRequest
		}
		return watchRequest
	case req.Progress != nil:
		return progressRequest
	}
	return closeRequest
}

type result struct {
	channel *Channel
	err     error
}

// DialOption adjusts Dial.
type DialOption func(*dialOptions)

type dialOptions struct {
	idleTimeout time.Duration
	maxOpening  int
}

// DefaultMaxOpening is half the server's default MaxPending. A server
// frees a pending slot before it answers, but hubs older than this
// client freed it just after, so a client at the exact bound could be
// refused now and then by one of them during a rolling upgrade; half
// leaves that margin and still opens a kubelet's few hundred channels in
// a handful of round trips.
var DefaultMaxOpening = DefaultOptions().MaxPending / 2

// WithMaxOpening makes Watch wait while n of the connection's Watch
// requests await their answers, rather than send more and have the
// server refuse them (429: it bounds the opens in flight per
// connection, --watch-max-pending). A caller opening many channels at
// once (a kubelet starting a pod with a hundred secrets and configmaps)
// then sees them all opened, a little later, instead of a share of
// 429s. 0 or less sends every request at once.
func WithMaxOpening(n int) DialOption {
	return func(o *dialOptions) { o.maxOpening = n }
}

// DefaultIdleTimeout is two of the server's default ping intervals: a
// live server sends a ping or a message well within it.
var DefaultIdleTimeout = 2 * DefaultOptions().PingInterval

// WithIdleTimeout ends the connection when nothing, neither a message nor
// a ping, has come from the server for d; 0 never does. A server that
// went away without closing its connections (its node lost, a network
// partition) is then noticed within d, where TCP's keepalive would take
// minutes, during which the channels would just be silent. Use at least
// twice the server's --watch-ping-interval.
func WithIdleTimeout(d time.Duration) DialOption {
	return func(o *dialOptions) { o.idleTimeout = d }
}

// Dial opens a bulk watch connection to the server cfg points at (a
// kube-apiserver, which proxies to nodeproxy, or nodeproxy itself). The
// upgrade goes under client-go's wrappers of cfg's credentials, so it
// authenticates as every client-go request does: client certificates,
// bearer tokens and token files, exec credential plugins, impersonation.
// A refused upgrade carries the server's Status when it sent one. A
// sharded hub's redirect to the replica that owns the caller's node is
// followed (redirect.go); Server says where the connection went.
func Dial(ctx context.Context, cfg *rest.Config, opts ...DialOption) (*Client, error) {
	o := dialOptions{idleTimeout: DefaultIdleTimeout, maxOpening: DefaultMaxOpening}
	for _, opt := range opts {
		opt(&o)
	}
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("server address %q: %w", cfg.Host, err)
	}
	u := strings.TrimSuffix(base.String(), "/") + Path + "?watch=1"
	ws, server, err := upgrade(ctx, cfg, u)
	if err != nil {
		return nil, err
	}
	c := &Client{
		ws: ws, pending: map[int64]chan result{}, kinds: map[int64]requestKind{},
		channels: map[int64]*Channel{}, done: make(chan struct{}), idleTimeout: o.idleTimeout, server: server,
		protobuf: ws.Subprotocol() == v1alpha1.WatchSubprotocolProtobuf,
	}
	if o.maxOpening > 0 {
		c.opening = make(chan struct{}, o.maxOpening)
	}
	if c.idleTimeout > 0 {
		c.extendDeadline()
		// gorilla's default handler answers pings; this one also takes
		// each ping as a sign of life. It runs in the reader.
		// Pongs answer a Session's keepalive pings: a sign of life too.
		ws.SetPongHandler(func(string) error { c.extendDeadline(); return nil })
		ws.SetPingHandler(func(data string) error {
			c.extendDeadline()
			// WriteControl may run beside the other writes.
			err := ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
			var ne net.Error
			if err == websocket.ErrCloseSent || errors.As(err, &ne) && ne.Timeout() {
				return nil
			}
			return err
		})
	}
	go c.readLoop()
	return c, nil
}

// WatchOption adjusts Watch.
type WatchOption func(*v1alpha1.Watch, *Client)

// InProtobuf asks for the channel's objects as kube-apiserver encodes them
// in protobuf (Event.Protobuf), when the server can send them so; events
// it sends as JSON, and every event from a server that cannot, carry
// Event.Object as before.
func InProtobuf() WatchOption {
	return func(w *v1alpha1.Watch, c *Client) {
		if c.protobuf {
			w.ContentType = v1alpha1.ContentTypeProtobuf
		}
	}
}

// Watch opens a channel of the objects sel selects. A refusal is an
// *apierrors.StatusError with the server's status. It waits first while
// the connection has its most Watch requests awaiting answers
// (WithMaxOpening).
func (c *Client) Watch(ctx context.Context, sel v1alpha1.GetOperation, opts ...WatchOption) (*Channel, error) {
	if c.opening != nil {
		select {
		case c.opening <- struct{}{}:
			defer func() { <-c.opening }()
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.done:
			return nil, fmt.Errorf("connection closed: %w", c.Err())
		}
	}
	w := &v1alpha1.Watch{Selector: sel}
	for _, opt := range opts {
		opt(w, c)
	}
	r, err := c.request(ctx, v1alpha1.WatchRequest{Watch: w})
	if err != nil {
		return nil, err
	}
	return r.channel, nil
}

// CloseWatch closes ch; its Events channel closes. What the client holds
// of it for the consumer goes at once, even when the connection has
// already ended and the server cannot answer.
func (c *Client) CloseWatch(ctx context.Context, ch *Channel) error {
	ch.drop()
	_, err := c.request(ctx, v1alpha1.WatchRequest{CloseWatch: &v1alpha1.CloseWatch{Channel: ch.ID}})
	return err
}

// RequestProgress asks channel channelID for a bookmark that answers
// token (v1alpha1.ProgressRequest) and waits for the server's response:
// nil once the request is accepted, an *apierrors.StatusError when it is
// refused (404: no such channel on the connection; 400: a channel that
// does not take progress requests, or a token that is empty or over
// v1alpha1.MaxProgressTokenLength bytes). The answer itself comes later,
// among the channel's Events: a BOOKMARK annotated
// v1alpha1.NodeViewProgressAnnotation with token, or with a later token
// of the same channel, which answers this one too.
func (c *Client) RequestProgress(ctx context.Context, channelID int64, token string) error {
	_, err := c.request(ctx, v1alpha1.WatchRequest{Progress: &v1alpha1.ProgressRequest{Channel: channelID, Token: token}})
	return err
}

// Close closes the connection with a normal close frame.
func (c *Client) Close() error {
	c.writeMu.Lock()
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	c.writeMu.Unlock()
	err := c.ws.Close()
	<-c.done
	return err
}

// ping sends a ping; the server's answer extends the idle timeout. It
// may run beside the other writes.
func (c *Client) ping() error {
	return c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second))
}

// Done is closed when the connection has ended; Err says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is why the connection ended: a *websocket.CloseError when the
// server closed it (CloseGoingAway: resubscribe elsewhere).
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Client) request(ctx context.Context, req v1alpha1.WatchRequest) (result, error) {
	answer := make(chan result, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return result{}, fmt.Errorf("connection closed: %w", c.err)
	}
	c.nextID++
	req.ID = c.nextID
	c.pending[req.ID] = answer
	c.kinds[req.ID] = kindOf(req)
	c.mu.Unlock()
	raw, err := json.Marshal(req)
	if err != nil {
		return result{}, err
	}
	c.writeMu.Lock()
	err = c.ws.WriteMessage(websocket.TextMessage, raw)
	c.writeMu.Unlock()
	if err != nil {
		return result{}, fmt.Errorf("send request: %w", err)
	}
	select {
	case r := <-answer:
		return r, r.err
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, req.ID)
		delete(c.kinds, req.ID)
		c.mu.Unlock()
		return result{}, ctx.Err()
	}
}

func (c *Client) readLoop() {
	var err error
	defer func() {
		c.mu.Lock()
		c.err = err
		for id, p := range c.pending {
			p <- result{err: fmt.Errorf("connection closed: %w", err)}
			delete(c.pending, id)
		}
		for id, ch := range c.channels {
			ch.end(false)
			delete(c.channels, id)
		}
		c.mu.Unlock()
		close(c.done)
	}()
	for {
		var kind int
		var data []byte
		if kind, data, err = c.ws.ReadMessage(); err != nil {
			return
		}
		c.extendDeadline()
		if err = c.handle(kind, data); err != nil {
			return
		}
	}
}

// handle takes in one message of the server: a response or an event.
func (c *Client) handle(kind int, data []byte) error {
	var msg v1alpha1.ServerMessage
	var protobuf []byte
	if kind == websocket.BinaryMessage {
		var err error
		if protobuf, err = readBinaryEvent(data, &msg); err != nil {
			return err
		}
	} else if err := json.Unmarshal(data, &msg); err != nil {
		return fmt.Errorf("server sent a message that is not JSON: %w", err)
	}
	if msg.Response != nil {
		c.answer(msg.Response)
		return nil
	}
	c.deliver(&msg, protobuf)
	return nil
}

func (c *Client) answer(r *v1alpha1.WatchResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pending[r.RequestID]
	if !ok {
		return // the caller gave up waiting, or a refusal of a message with no id
	}
	kind := c.kinds[r.RequestID]
	delete(c.pending, r.RequestID)
	delete(c.kinds, r.RequestID)
	if r.Error != nil {
		p <- result{err: &apierrors.StatusError{ErrStatus: *r.Error}}
		return
	}
	switch kind {
	case progressRequest:
		p <- result{}
		return
	case closeRequest:
		if ch, ok := c.channels[r.Channel]; ok {
			ch.end(true)
			delete(c.channels, r.Channel)
		}
		p <- result{}
		return
	}
	// One slot more than the buffer: room for the ERROR that ends the
	// channel when the consumer falls behind.
	events := make(chan Event, ClientEventBuffer+1)
	ch := &Channel{ID: r.Channel, Events: events, events: events}
	if kind == initialWatchRequest {
		ch.initial = newInitialState()
		go ch.forward()
	}
	c.channels[r.Channel] = ch
	p <- result{channel: ch}
}

// deliver hands an event to its channel without ever waiting. Only the
// reader sends on or closes a channel's Events (or, for a channel with an
// initial state, hands them to its forwarder), so the room it sees is
// there when it sends.
func (c *Client) deliver(msg *v1alpha1.ServerMessage, protobuf []byte) {
	c.mu.Lock()
	ch, ok := c.channels[msg.Channel]
	overflow := ok && msg.Type != watch.Error && ch.full()
	if ok && (msg.Type == watch.Error || overflow) {
		delete(c.channels, msg.Channel)
	}
	c.mu.Unlock()
	if !ok {
		return // closed by us a moment ago
	}
	if overflow {
		clientOverflowsTotal.Inc()
		klog.InfoS("Bulk watch channel closed: its consumer left too many events unread", "channel", ch.ID, "unread", ClientEventBuffer)
		ch.put(Event{Type: watch.Error, Status: &metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired,
			Message: fmt.Sprintf("too slow: the consumer left %d events unread; resubscribe from the last resourceVersion received", ClientEventBuffer),
		}})
		ch.end(false)
		c.closeQuietly(ch.ID)
		return
	}
	ev := Event{Type: msg.Type, Object: msg.Object, Protobuf: protobuf}
	if msg.Type == watch.Error {
		var s metav1.Status
		if err := json.Unmarshal(msg.Object, &s); err == nil {
			ev.Status = &s
		} else {
			ev.Status = &metav1.Status{Message: "the server closed the channel with an unreadable status"}
		}
	}
	ch.put(ev)
	if msg.Type == watch.Error {
		ch.end(false)
	}
}

// closeQuietly asks the server to close channel id without waiting for
// the answer (the reader, which would deliver it, is the caller).
func (c *Client) closeQuietly(id int64) {
	c.mu.Lock()
	c.nextID++
	req := v1alpha1.WatchRequest{ID: c.nextID, CloseWatch: &v1alpha1.CloseWatch{Channel: id}}
	c.mu.Unlock()
	raw, err := json.Marshal(req)
	if err != nil {
		return
	}
	c.writeMu.Lock()
	_ = c.ws.WriteMessage(websocket.TextMessage, raw)
	c.writeMu.Unlock()
}
