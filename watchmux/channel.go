package watchmux

import (
	"context"
	"net/http"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// Sink is how a stream feeds its channel. It never blocks: events wait in
// the connection's write queue, and a channel whose events outnumber
// Options.ChannelQueue is closed with ERROR 410.
type Sink interface {
	// Send queues an event of an object already encoded as JSON (with
	// apiVersion and kind) or, on a channel that asked for it (Protobuf),
	// as kube-apiserver encodes it in protobuf (from the "k8s\x00" magic
	// on). The bytes are not copied and must not change.
	// It returns false once the channel is closed: by the client, by the
	// server, by overflow, or with the connection. The stream should then
	// stop.
	Send(t watch.EventType, object []byte) bool
	// Initial queues an event of the channel's initial state (ADDED, and
	// the BOOKMARK that ends it). Unlike Send it is not bounded by
	// Options.ChannelQueue, nor counted against it: the initial state is
	// bounded by the cache, and a watch of a large namespace must be able
	// to start.
	Initial(t watch.EventType, object []byte) bool
	// OnClose registers f to run once, on no particular goroutine, when
	// the channel closes for any reason. It lets a stream leave the
	// indexes that feed it without a goroutine per channel waiting on
	// Done. Call it from Open.
	OnClose(f func())
	// Close ends the channel with an ERROR event carrying status; nothing
	// follows it.
	Close(status *metav1.Status)
	// Done is closed when the channel is closed, whoever closed it.
	Done() <-chan struct{}
	// Protobuf reports whether the client asked for the channel's objects
	// in protobuf. JSON is always welcome as well: a stream may send
	// what it has only as JSON (a bookmark) that way.
	Protobuf() bool
}

// ProgressSink is a Sink whose client may ask it for progress (a
// v1alpha1.ProgressRequest); every channel of a Server is one. A stream
// that can answer, with a bookmark of a position at or past what its
// source held when the request came, calls OnProgress from Open; the
// channels of the others refuse progress requests (400), so a client
// never waits for an answer that cannot come.
type ProgressSink interface {
	Sink
	// OnProgress registers f to take the channel's progress requests,
	// in the order they came, each with its token. f runs on the
	// connection's reader, after the request's response is queued, so
	// it must not block: it records the request, and the stream answers
	// it later, with an event that then follows the response.
	OnProgress(f func(token string))
}

// channel is one watch on a connection.
type channel struct {
	id   int64
	conn *conn
	// protobuf: the client asked for protobuf objects (Sink.Protobuf).
	protobuf bool

	ctx    context.Context
	cancel context.CancelFunc

	// queued counts this channel's frames in the connection's queue;
	// closed says no frame may follow; announced that its response is
	// queued; closeStatus is the ERROR of a channel closed before it was
	// announced, written after the response; onClose runs when it closes.
	// All are guarded by conn.mu.
	queued    int
	closed    bool
	announced bool
	// flush: closed by the server's shutdown, its events still queued
	// are written before its ERROR rather than dropped, so that what the
	// handler sent last (a node view's bookmark at the replica's final
	// position) reaches the client and the next replica resumes from it.
	flush       bool
	closeStatus *metav1.Status
	onClose     []func()
	// progress takes the client's progress requests (OnProgress); nil
	// if the stream does not.
	progress func(token string)
	// room, if a stream waits in WaitRoom, is closed when the writer takes
	// one of this channel's events.
	room chan struct{}
}

var _ ProgressSink = (*channel)(nil)

func (c *channel) Send(t watch.EventType, object []byte) bool {
	return c.conn.enqueue(c, t, object, true)
}

func (c *channel) Initial(t watch.EventType, object []byte) bool {
	return c.conn.enqueue(c, t, object, false)
}

// WaitRoom blocks until the channel may queue another event without
// overflowing, and reports whether it is still open. A stream that can
// hold its source back (a watch on kube-apiserver, read only as fast as
// the client takes its events) calls it before each Send, and the channel
// never overflows; the cache's fan-out cannot wait for one client and
// does not call it, so its slow channels end with 410 instead. Room opens
// when the writer takes the events, so a client that stops reading holds
// the stream back until WriteTimeout ends the connection.
func (c *channel) WaitRoom() bool {
	for {
		c.conn.mu.Lock()
		if c.closed {
			c.conn.mu.Unlock()
			return false
		}
		if c.queued < c.conn.opts.ChannelQueue {
			c.conn.mu.Unlock()
			return true
		}
		if c.room == nil {
			c.room = make(chan struct{})
		}
		room := c.room
		c.conn.mu.Unlock()
		select {
		case <-room:
		case <-c.ctx.Done():
			return false
		}
	}
}

func (c *channel) OnClose(f func()) {
	c.conn.mu.Lock()
	if !c.closed {
		c.onClose = append(c.onClose, f)
		c.conn.mu.Unlock()
		return
	}
	c.conn.mu.Unlock()
	f()
}

func (c *channel) OnProgress(f func(token string)) {
	c.conn.mu.Lock()
	c.progress = f
	c.conn.mu.Unlock()
}

func (c *channel) Close(status *metav1.Status) {
	c.conn.closeChannel(c, status)
}

func (c *channel) Done() <-chan struct{} { return c.ctx.Done() }

func (c *channel) Protobuf() bool { return c.protobuf }

// tooSlow is the ERROR of a channel whose queue overflowed. The client
// resubscribes from the last resourceVersion it saw.
func tooSlow(limit int) *metav1.Status {
	return &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired,
		Message: "too slow: more than " + strconv.Itoa(limit) + " events waiting on this channel; resubscribe from the last resourceVersion received",
	}
}

// closedByServer is the ERROR of every channel when the server shuts down.
var closedByServer = &metav1.Status{
	Status: metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable,
	Message: "the server is shutting down; resubscribe elsewhere",
}
