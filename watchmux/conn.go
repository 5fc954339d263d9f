package watchmux

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// conn serves one websocket. Three kinds of goroutine touch it:
//
//   - the reader (serve): decodes requests, opens and closes channels,
//     hands progress requests to their streams;
//   - the writer (writeLoop): the only one that writes data frames,
//     draining the queue in order, pinging when idle;
//   - streams, one per channel, which only enqueue (Sink.Send) and never
//     block.
//
// mu guards the queue and every channel's queued/closed state; it is held
// for appends and swaps only, never across a write to the network.
type conn struct {
	ws      *websocket.Conn
	batch   *batchingConn // the socket under ws; nil if not ours
	opts    Options
	handler Handler
	metrics *counters
	// protobuf is set when the connection speaks
	// WatchSubprotocolProtobuf: its channels may ask for protobuf.
	protobuf bool

	ctx    context.Context // ends with the connection
	cancel context.CancelFunc

	// wake has room for one signal: the writer drains everything queued
	// whenever it wakes, so one pending signal covers any number of
	// enqueues.
	wake    chan struct{}
	pending chan struct{} // a slot per Watch request in flight

	mu    sync.Mutex
	queue []frame // guarded by mu
	// spare is the slice of the batch written last, emptied, for the
	// next swap: steady traffic then allocates no queue at all.
	spare    []frame            // guarded by mu
	channels map[int64]*channel // guarded by mu
	// slots counts the channels open plus those being opened: a slot is
	// taken when the reader accepts a Watch, before Handler.Open (which
	// may wait on a SubjectAccessReview), and given back when the open
	// fails or the channel closes. Counting open channels alone let a
	// burst of opens all pass the check before any registered (issue 14:
	// 4,128 channels on a limit of 4,096).
	slots   int  // guarded by mu
	closing bool // guarded by mu: shutting down, close when drained
	// closeStatus is what the channels were ended with when closing was
	// set: it chooses the close frame.
	closeStatus *metav1.Status // guarded by mu

	nextID int64 // reader only: channel identifiers are never reused

	// draining is set by shutdown: the writer then skips the events of
	// the batch it is writing whose channel has closed, so that the
	// ERRORs and the close frame are not queued behind events no one
	// will use (a slow client's batch can be thousands of events).
	draining atomic.Bool
}

func newConn(ctx context.Context, ws *websocket.Conn, h Handler, o Options, m *counters) *conn {
	c := &conn{
		ws: ws, opts: o, handler: h, metrics: m,
		wake:     make(chan struct{}, 1),
		pending:  make(chan struct{}, o.MaxPending),
		channels: map[int64]*channel{},
	}
	c.ctx, c.cancel = context.WithCancel(ctx)
	return c
}

// serve runs the connection until the client goes, a write fails, or the
// server shuts it down. It returns when both loops have ended.
func (c *conn) serve() {
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		c.readLoop()
		c.cancel()
	}()
	c.writeLoop()
	// After a close frame, give the client a moment to answer it.
	select {
	case <-readerDone:
	case <-time.After(c.opts.WriteTimeout):
	}
	c.ws.Close()
	<-readerDone
	c.mu.Lock()
	var callbacks []func()
	for _, ch := range c.channels {
		ch.closed = true
		ch.cancel()
		callbacks = append(callbacks, ch.onClose...)
		ch.onClose = nil
		c.slots--
		c.metrics.channels.Dec()
	}
	c.channels = nil
	c.mu.Unlock()
	runAll(callbacks)
}

func (c *conn) readLoop() {
	c.ws.SetReadLimit(c.opts.ReadLimit)
	// A client is dead once it has let a whole ping interval pass without
	// answering a ping (2 intervals without a message). Its pong queues
	// behind whatever the server sent before the ping, so a budget as
	// short as WriteTimeout disconnected live clients of a loaded server
	// (seen in the 2,000-connection benchmark); a client that does not
	// read at all is caught sooner by the write timeout anyway.
	alive := func() { _ = c.ws.SetReadDeadline(time.Now().Add(2 * c.opts.PingInterval)) }
	alive()
	c.ws.SetPongHandler(func(string) error { alive(); return nil })
	for {
		kind, data, err := c.ws.ReadMessage()
		if err != nil {
			if !websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway) && c.ctx.Err() == nil {
				klog.V(3).InfoS("Bulk watch connection ended", "err", err)
			}
			return
		}
		alive()
		if kind != websocket.TextMessage {
			c.respond(v1alpha1.WatchResponse{Error: badRequest("binary messages are not part of the protocol: send one JSON request per text message")})
			continue
		}
		req, refused := decodeRequest(data)
		if refused != nil {
			c.metrics.requests.WithLabelValues("invalid").Inc()
			c.respond(v1alpha1.WatchResponse{RequestID: req.ID, Error: refused})
			continue
		}
		if req.Watch != nil {
			protobuf, refused := c.contentType(req.Watch.ContentType)
			if refused != nil {
				c.metrics.requests.WithLabelValues("invalid").Inc()
				c.respond(v1alpha1.WatchResponse{RequestID: req.ID, Error: refused})
				continue
			}
			c.open(req.ID, &req.Watch.Selector, protobuf)
		} else if req.CloseWatch != nil {
			c.closeWatch(req.ID, req.CloseWatch.Channel)
		} else {
			c.requestProgress(req.ID, req.Progress)
		}
	}
}

// open starts a channel. Authorizing it may take a round trip to
// kube-apiserver, so it runs beside the reader, at most MaxPending at once.
func (c *conn) open(requestID int64, sel *v1alpha1.GetOperation, protobuf bool) {
	c.mu.Lock()
	taken := c.slots
	if taken < c.opts.MaxChannels {
		c.slots++
	}
	c.mu.Unlock()
	if taken >= c.opts.MaxChannels {
		c.metrics.requests.WithLabelValues("too_many_channels").Inc()
		c.respond(v1alpha1.WatchResponse{RequestID: requestID, Error: tooMany("this connection has %d channels open or being opened, the most allowed", taken)})
		return
	}
	select {
	case c.pending <- struct{}{}:
	default:
		c.mu.Lock()
		c.slots--
		c.mu.Unlock()
		c.metrics.requests.WithLabelValues("too_many_pending").Inc()
		c.respond(v1alpha1.WatchResponse{RequestID: requestID, Error: tooMany("%d watch requests are already being opened on this connection, the most allowed", c.opts.MaxPending)})
		return
	}
	c.nextID++
	ch := &channel{id: c.nextID, conn: c, protobuf: protobuf}
	ch.ctx, ch.cancel = context.WithCancel(c.ctx)
	go func() {
		run, refused := c.handler.Open(ch.ctx, sel, ch)
		// The slot bounds authorizations in flight, and this one is
		// decided: free it before the client can hear the answer, so that
		// a client keeping to MaxPending (watchmux.WithMaxOpening) is never
		// refused for a slot not yet given back.
		<-c.pending
		if refused != nil {
			c.mu.Lock()
			c.slots--
			ch.closed = true
			callbacks := ch.onClose
			ch.onClose = nil
			c.mu.Unlock()
			ch.cancel()
			runAll(callbacks)
			c.metrics.requests.WithLabelValues("refused").Inc()
			c.respond(v1alpha1.WatchResponse{RequestID: requestID, Error: refused})
			return
		}
		c.mu.Lock()
		if c.channels == nil || c.closing { // the connection ended meanwhile
			c.slots--
			ch.closed = true
			callbacks := ch.onClose
			c.mu.Unlock()
			ch.cancel()
			runAll(callbacks)
			return
		}
		// The response is queued before the stream runs: it precedes
		// every event of the channel.
		c.queue = append(c.queue, responseFrame(v1alpha1.WatchResponse{RequestID: requestID, Channel: ch.id}))
		ch.announced = true
		c.metrics.requests.WithLabelValues("opened").Inc()
		if ch.closed {
			// Closed while it was being opened (access lost at once):
			// the client learns of the channel, then of its end.
			c.slots--
			if ch.closeStatus != nil {
				c.queue = append(c.queue, frame{ch: ch, typ: watch.Error, object: statusJSON(ch.closeStatus), final: true})
			}
			c.mu.Unlock()
			c.signal()
			return
		}
		c.channels[ch.id] = ch
		c.metrics.channels.Inc()
		c.mu.Unlock()
		c.signal()
		if run != nil {
			go run()
		}
	}()
}

func (c *conn) closeWatch(requestID, id int64) {
	c.mu.Lock()
	ch, ok := c.channels[id]
	c.mu.Unlock()
	if !ok {
		c.respond(v1alpha1.WatchResponse{RequestID: requestID, Error: notOpen(id)})
		return
	}
	c.closeChannel(ch, nil)
	c.metrics.requests.WithLabelValues("closed").Inc()
	c.respond(v1alpha1.WatchResponse{RequestID: requestID, Channel: id})
}

// requestProgress hands a progress request to its channel's stream. The
// response is queued first, then the stream is told: the bookmark that
// answers, which the stream queues later, follows the response, as a
// channel's events follow its own response. A channel whose stream does
// not take progress requests refuses it: the client would otherwise
// wait for a bookmark that never comes.
func (c *conn) requestProgress(requestID int64, p *v1alpha1.ProgressRequest) {
	c.mu.Lock()
	ch, ok := c.channels[p.Channel]
	var take func(string)
	if ok {
		take = ch.progress
	}
	c.mu.Unlock()
	switch {
	case !ok:
		c.metrics.requests.WithLabelValues("progress_refused").Inc()
		c.respond(v1alpha1.WatchResponse{RequestID: requestID, Error: notOpen(p.Channel)})
		return
	case take == nil:
		c.metrics.requests.WithLabelValues("progress_refused").Inc()
		c.respond(v1alpha1.WatchResponse{RequestID: requestID, Error: badRequest(
			"channel " + strconv.FormatInt(p.Channel, 10) + " does not take progress requests: only a node view does")})
		return
	}
	c.metrics.requests.WithLabelValues("progress").Inc()
	c.respond(v1alpha1.WatchResponse{RequestID: requestID, Channel: p.Channel})
	take(p.Token)
}

func notOpen(id int64) *metav1.Status {
	return &metav1.Status{
		Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
		Message: "channel " + strconv.FormatInt(id, 10) + " is not open on this connection",
	}
}

// closeChannel closes ch, with a final ERROR carrying status unless status
// is nil (the client closed it). Events of ch still queued are dropped,
// except at shutdown (channel.flush).
func (c *conn) closeChannel(ch *channel, status *metav1.Status) {
	c.mu.Lock()
	callbacks := c.closeChannelLocked(ch, status)
	c.mu.Unlock()
	c.signal()
	runAll(callbacks)
}

// closeChannelLocked closes ch and returns the callbacks the caller must
// run once it has released mu.
func (c *conn) closeChannelLocked(ch *channel, status *metav1.Status) []func() {
	if ch.closed {
		return nil
	}
	ch.closed = true
	ch.cancel()
	callbacks := ch.onClose
	ch.onClose = nil
	if !ch.announced {
		ch.closeStatus = status // written after the response
		return callbacks
	}
	if c.channels != nil {
		delete(c.channels, ch.id)
	}
	c.slots--
	c.metrics.channels.Dec()
	if status != nil {
		c.queue = append(c.queue, frame{ch: ch, typ: watch.Error, object: statusJSON(status), final: true})
		c.metrics.closed.WithLabelValues(reasonOf(status)).Inc()
	} else {
		c.metrics.closed.WithLabelValues("client").Inc()
	}
	return callbacks
}

func runAll(fs []func()) {
	for _, f := range fs {
		f()
	}
}

// enqueue is Sink.Send (bounded) and Sink.Initial (not bounded).
func (c *conn) enqueue(ch *channel, t watch.EventType, object []byte, bounded bool) bool {
	c.mu.Lock()
	if ch.closed {
		c.mu.Unlock()
		return false
	}
	if bounded && ch.queued >= c.opts.ChannelQueue {
		callbacks := c.closeChannelLocked(ch, tooSlow(c.opts.ChannelQueue))
		c.mu.Unlock()
		c.signal()
		runAll(callbacks)
		return false
	}
	if bounded {
		ch.queued++
	}
	c.queue = append(c.queue, frame{ch: ch, typ: t, object: object, unbounded: !bounded})
	c.mu.Unlock()
	c.signal()
	return true
}

func (c *conn) respond(r v1alpha1.WatchResponse) {
	f := responseFrame(r)
	c.mu.Lock()
	c.queue = append(c.queue, f)
	c.mu.Unlock()
	c.signal()
}

func (c *conn) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// take swaps the queue out, leaving out events of channels closed since
// they were queued.
func (c *conn) take() (batch []frame, closing bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	batch, c.queue, c.spare = c.queue, c.spare, nil
	kept := batch[:0]
	for _, f := range batch {
		if f.ch != nil && !f.final {
			if !f.unbounded {
				f.ch.queued--
				if f.ch.room != nil {
					close(f.ch.room)
					f.ch.room = nil
				}
			}
			if f.ch.closed && !f.ch.flush {
				continue
			}
		}
		kept = append(kept, f)
	}
	clear(batch[len(kept):])
	return kept, c.closing && len(kept) == 0
}

// maxSpare bounds the queue slice a connection keeps between batches: a
// burst (a large initial state) must not leave an idle connection holding
// its whole length.
const maxSpare = 64

// done hands back the slice of a written batch.
func (c *conn) done(batch []frame) {
	if cap(batch) > maxSpare {
		return
	}
	clear(batch) // drop the references to encoded objects
	c.mu.Lock()
	c.spare = batch[:0]
	c.mu.Unlock()
}

func (c *conn) writeLoop() {
	ping := time.NewTicker(c.opts.PingInterval)
	defer ping.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-ping.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.opts.WriteTimeout)); err != nil {
				c.fail(err)
				return
			}
			continue
		case <-c.wake:
		}
		for {
			batch, closing := c.take()
			if closing {
				msg := c.closeMessage()
				result := "closed"
				if err := c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(c.opts.WriteTimeout)); err != nil {
					result = "write_failed"
				}
				shutdownTotal.WithLabelValues(result).Inc()
				c.cancel()
				return
			}
			if len(batch) == 0 {
				break
			}
			if c.batch != nil {
				c.batch.begin()
			}
			for i := range batch {
				if c.draining.Load() && c.dropped(&batch[i]) {
					continue
				}
				if err := c.write(&batch[i]); err != nil {
					if c.batch != nil {
						_ = c.batch.end()
					}
					c.fail(err)
					return
				}
			}
			if c.batch != nil {
				if err := c.batch.end(); err != nil {
					c.fail(err)
					return
				}
			}
			c.metrics.written.Add(float64(len(batch)))
			c.metrics.batch.Observe(float64(len(batch)))
			c.done(batch)
		}
	}
}

func (c *conn) write(f *frame) error {
	if err := c.ws.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout)); err != nil {
		return err
	}
	kind := websocket.TextMessage
	if f.binary() {
		kind = websocket.BinaryMessage
	}
	w, err := c.ws.NextWriter(kind)
	if err != nil {
		return err
	}
	if err := f.writeTo(w); err != nil {
		return err
	}
	return w.Close()
}

// fail ends the connection after a write failed: the client is gone or
// does not read.
func (c *conn) fail(err error) {
	var netErr interface{ Timeout() bool }
	if errors.As(err, &netErr) && netErr.Timeout() {
		c.metrics.writeTimeouts.Inc()
	}
	klog.V(3).InfoS("Bulk watch connection write failed", "err", err)
	c.cancel()
	c.ws.Close() // unblocks the reader
}

// closeMessage is the close frame of a connection the server ends: going
// away (resubscribe elsewhere) when it shuts down or the connection is
// old; a policy violation, with the status's message, when the caller's
// credential no longer authenticates, so that a client does not take it
// for a replica going.
func (c *conn) closeMessage() []byte {
	c.mu.Lock()
	st := c.closeStatus
	c.mu.Unlock()
	if st != nil && st.Code == http.StatusUnauthorized {
		return websocket.FormatCloseMessage(websocket.ClosePolicyViolation, st.Message)
	}
	return websocket.FormatCloseMessage(websocket.CloseGoingAway, "server shutting down; resubscribe elsewhere")
}

// dropped reports whether f is an event of a channel closed since the
// batch was taken.
func (c *conn) dropped(f *frame) bool {
	if f.ch == nil || f.final {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return f.ch.closed && !f.ch.flush
}

// shutdown ends every channel with closedByServer, then the connection
// with a close frame once they are written.
func (c *conn) shutdown() { c.end(closedByServer) }

// end ends every channel with status as its ERROR, then the connection
// with a close frame once they are written; channels asked for meanwhile
// are not opened.
func (c *conn) end(status *metav1.Status) {
	c.draining.Store(true)
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	c.closing = true
	c.closeStatus = status
	var callbacks []func()
	for _, ch := range c.channels {
		ch.flush = true
		callbacks = append(callbacks, c.closeChannelLocked(ch, status)...)
	}
	c.mu.Unlock()
	c.signal()
	runAll(callbacks)
}
