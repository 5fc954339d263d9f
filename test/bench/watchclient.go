package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/gorilla/websocket"
	"k8s.io/client-go/transport"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// watchClient is one node's websocket: it reads everything, and notes
// when each event of its target channel arrived.
type watchClient struct {
	ws     *websocket.Conn
	target int64 // channel of the most watched secret; 0 if not subscribed
	// onTarget is the events read on target; forbidden the ERROR 403 that
	// ended it.
	onTarget, forbidden heard
	errors              atomic.Int64
	buf                 []byte
}

// dialNode opens node n's websocket to p, with a read buffer of bufSize.
func dialNode(ctx context.Context, p *inProcess, n, bufSize int) (*watchClient, error) {
	dialer := websocket.Dialer{TLSClientConfig: p.TLS, Subprotocols: []string{v1alpha1.WatchSubprotocol}}
	as := asNode(n)
	ws, _, err := dialer.DialContext(ctx, p.URL, http.Header{transport.ImpersonateUserHeader: {as.UserName}, transport.ImpersonateGroupHeader: as.Groups})
	if err != nil {
		return nil, fmt.Errorf("node %d: %w", n, err)
	}
	return &watchClient{ws: ws, buf: make([]byte, 0, bufSize)}, nil
}

// fleet is the watching nodes' clients and their readers.
type fleet struct {
	clients []*watchClient
	readers sync.WaitGroup
}

// dial opens the websockets of nodes 0..n-1 to p, with read buffers of
// bufSize, as a phase of env's.
func (f *fleet) dial(ctx context.Context, env *Env, p *inProcess, n, bufSize int, format string, args ...any) error {
	bar := env.phase(n, format, args...)
	defer bar.Done()
	for i := range n {
		c, err := dialNode(ctx, p, i, bufSize)
		if err != nil {
			return err
		}
		f.clients = append(f.clients, c)
		bar.Add(1)
	}
	return nil
}

// read starts c's reader; c must have subscribed.
func (f *fleet) read(c *watchClient) { f.readers.Go(c.read) }

// close closes every connection, which ends the readers, and waits for
// them.
func (f *fleet) close() {
	for _, c := range f.clients {
		c.ws.Close()
	}
	f.readers.Wait()
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
				c.forbidden.record()
			}
			continue
		}
		if id == c.target {
			c.onTarget.record()
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
