package watchmux

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"time"
)

// batchingConn lets the connection's writer send everything it drained
// from its queue in one socket write (and as few TLS records as fit)
// instead of one per message: gorilla/websocket writes each message to
// the net.Conn as soon as it is complete, and a write per message is what
// capped delivery (docs/architecture.md, "Bulk watch").
//
// Writes are buffered only between begin and end, which the writer calls
// around a batch; at any other time (pongs and close frames from the
// reader, pings) they go straight through. The buffer is taken from a pool
// for the batch only, so an idle connection holds none.
type batchingConn struct {
	net.Conn

	mu       sync.Mutex
	buf      *bufio.Writer // guarded by mu; non-nil during a batch
	writeErr error         // guarded by mu: the first failed buffered write
	// deadline is the write deadline gorilla set during a batch (it sets
	// one per message); it is applied to the socket only before bytes
	// actually go out, which saves a timer update per message.
	deadline time.Time // guarded by mu
}

// batchBufferSize is two full TLS records: large enough that a batch of
// small events costs a handful of syscalls, small enough to pool freely.
const batchBufferSize = 32 << 10

var batchBuffers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, batchBufferSize) }}

func (b *batchingConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf == nil {
		return b.Conn.Write(p)
	}
	if len(p) > b.buf.Available() {
		// This write reaches the socket: with the latest deadline.
		if err := b.Conn.SetWriteDeadline(b.deadline); err != nil {
			return 0, err
		}
	}
	n, err := b.buf.Write(p) // writes through to the socket when full
	if err != nil && b.writeErr == nil {
		b.writeErr = err
	}
	return n, err
}

// SetWriteDeadline applies at once outside a batch, and before the next
// socket write inside one.
func (b *batchingConn) SetWriteDeadline(t time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf == nil {
		return b.Conn.SetWriteDeadline(t)
	}
	b.deadline = t
	return nil
}

// begin starts buffering.
func (b *batchingConn) begin() {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := batchBuffers.Get().(*bufio.Writer)
	w.Reset(b.Conn)
	b.buf = w
}

// end writes what the batch buffered and stops buffering.
func (b *batchingConn) end() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf == nil {
		return nil
	}
	err := b.Conn.SetWriteDeadline(b.deadline)
	if err == nil {
		err = b.buf.Flush()
	}
	if b.writeErr != nil {
		err = b.writeErr
	}
	b.buf.Reset(nil)
	batchBuffers.Put(b.buf)
	b.buf, b.writeErr = nil, nil
	return err
}

// batchingHijacker hands gorilla/websocket a batchingConn when it hijacks
// the upgrade's connection.
type batchingHijacker struct {
	http.ResponseWriter
	conn *batchingConn
}

func (h *batchingHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.conn = &batchingConn{Conn: c}
	return h.conn, rw, nil
}
