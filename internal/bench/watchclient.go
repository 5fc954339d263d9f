package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/internal/workload"
)

// watchClient is one node's websocket: it reads everything, and notes
// when each event of its target channel arrived.
type watchClient struct {
	ws     *websocket.Conn
	target int64 // channel of the most watched secret; 0 if not subscribed
	// targetEvents counts events read on target; lastTarget is when the
	// last one arrived (unix nanoseconds).
	targetEvents, lastTarget atomic.Int64
	errors                   atomic.Int64
	// forbiddenAt is when an ERROR 403 ended target (unix nanoseconds).
	forbiddenAt atomic.Int64
	buf         []byte
}

// dialNode opens node n's websocket to p, with a read buffer of bufSize.
func dialNode(ctx context.Context, p *inProcess, n, bufSize int) (*watchClient, error) {
	dialer := websocket.Dialer{TLSClientConfig: p.TLS, Subprotocols: []string{v1alpha1.WatchSubprotocol}}
	ws, _, err := dialer.DialContext(ctx, p.URL, http.Header{benchNodeHeader: {workload.NodeName(n)}})
	if err != nil {
		return nil, fmt.Errorf("node %d: %w", n, err)
	}
	return &watchClient{ws: ws, buf: make([]byte, 0, bufSize)}, nil
}

// subscribe opens a channel per subscription, changes only, and reads
// their responses; the channel of target becomes c.target. Every channel
// must be allowed: the scenarios ask only for what the node's pods use.
// Call it before read.
func (c *watchClient) subscribe(subs []subscription, target subscription) error {
	targetRequest := int64(-1)
	for i, s := range subs {
		if s == target {
			targetRequest = int64(i)
		}
		req, err := json.Marshal(v1alpha1.WatchRequest{ID: int64(i), Watch: &v1alpha1.Watch{Selector: v1alpha1.GetOperation{
			Resource: metav1GVR(s.resource), Namespace: s.namespace, Options: fieldSelector(s.name),
		}}})
		if err != nil {
			return err
		}
		if err := c.ws.WriteMessage(websocket.TextMessage, req); err != nil {
			return err
		}
	}
	// Responses come before any event: nothing has changed yet.
	for range subs {
		data, err := readMessage(c.ws, &c.buf)
		if err != nil {
			return err
		}
		var msg v1alpha1.ServerMessage
		if err := json.Unmarshal(data, &msg); err != nil || msg.Response == nil {
			return fmt.Errorf("expected a response, got %.200s", data)
		}
		if msg.Response.Error != nil {
			return fmt.Errorf("a channel it should have was refused: %s", msg.Response.Error.Message)
		}
		if msg.Response.RequestID == targetRequest {
			c.target = msg.Response.Channel
		}
	}
	return nil
}

// read counts events until the connection ends.
func (c *watchClient) read() {
	prefix := []byte(`{"channel":`)
	for {
		data, err := readMessage(c.ws, &c.buf)
		if err != nil {
			return
		}
		if !bytes.HasPrefix(data, prefix) {
			continue
		}
		rest := data[len(prefix):]
		end := bytes.IndexByte(rest, ',')
		if end < 0 {
			continue
		}
		id, _ := strconv.ParseInt(string(rest[:end]), 10, 64)
		if bytes.HasPrefix(rest[end:], []byte(`,"type":"ERROR"`)) {
			c.errors.Add(1)
			if id == c.target && bytes.Contains(data, []byte(`"code":403`)) {
				c.forbiddenAt.Store(time.Now().UnixNano())
			}
			continue
		}
		if id == c.target {
			c.lastTarget.Store(time.Now().UnixNano())
			c.targetEvents.Add(1)
		}
	}
}

// readMessage reads the next message into *buf's storage, growing it when
// needed: the clients share the machine with the server, and a message
// allocated per read would be garbage the server's collector pays for.
func readMessage(ws *websocket.Conn, buf *[]byte) ([]byte, error) {
	_, r, err := ws.NextReader()
	if err != nil {
		return nil, err
	}
	b := (*buf)[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			*buf = b
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
