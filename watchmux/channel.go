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
	// apiVersion and kind). The bytes are not copied and must not change.
	// It returns false once the channel is closed: by the client, by the
	// server, by overflow, or with the connection. The stream should then
	// stop.
	Send(t watch.EventType, object []byte) bool
	// Close ends the channel with an ERROR event carrying status; nothing
	// follows it.
	Close(status *metav1.Status)
	// Done is closed when the channel is closed, whoever closed it.
	Done() <-chan struct{}
}

// channel is one watch on a connection.
type channel struct {
	id   int64
	conn *conn

	ctx    context.Context
	cancel context.CancelFunc

	// queued counts this channel's frames in the connection's queue;
	// closed says no frame may follow. Both are guarded by conn.mu.
	queued int
	closed bool
}

var _ Sink = (*channel)(nil)

func (c *channel) Send(t watch.EventType, object []byte) bool {
	return c.conn.enqueueEvent(c, t, object)
}

func (c *channel) Close(status *metav1.Status) {
	c.conn.closeChannel(c, status)
}

func (c *channel) Done() <-chan struct{} { return c.ctx.Done() }

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
