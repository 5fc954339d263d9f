package watchmux

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/nodeproxy/nodeproxy/internal/liveheap"

	"github.com/gorilla/websocket"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// BenchmarkBytesPerConnection measures the live heap of an open, idle
// connection over TLS, both ends (client and server are in this
// process): each of 200 connections opens one channel, reads its one
// event and then waits. served=detached/writes=pooled is the server as
// the hub runs it (ServeDetached, its connections' write buffers taken
// from a pool for each message, a read buffer of their own that lets
// the HTTP server's go); served=handler serves each connection
// on its request's goroutine (ServeHTTP), which holds the request and
// the HTTP server's state for the connection's life (the hub's handler
// chain, far longer than this test's, with it); writes=held keeps each
// connection's write buffer for its life, gorilla's default. The
// differences are the server's savings per idle connection.
//
//	go test ./watchmux -run '^$' -bench BytesPerConnection -benchtime 1x -count 3
func BenchmarkBytesPerConnection(b *testing.B) {
	for _, tc := range []struct {
		name     string
		detached bool
		pool     websocket.BufferPool
	}{{"detached/writes=pooled", true, &messageBuffers}, {"handler/writes=pooled", false, &messageBuffers}, {"handler/writes=held", false, nil}} {
		b.Run("served="+tc.name, func(b *testing.B) {
			for b.Loop() {
				benchmarkBytesPerConnection(b, tc.detached, tc.pool)
			}
		})
	}
}

func benchmarkBytesPerConnection(b *testing.B, detached bool, pool websocket.BufferPool) {
	const conns = 200
	srv, hs, _ := startServer(b, DefaultOptions())
	srv.upgrader.WriteBufferPool = pool
	if detached {
		hs.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			srv.ServeDetached(context.Background(), w, r, nil, func() {})
		})
	}
	d := websocket.Dialer{TLSClientConfig: tlsFor(hs), Subprotocols: []string{v1alpha1.WatchSubprotocol}}
	url := "wss" + strings.TrimPrefix(hs.URL, "https") + Path + "?watch=1"
	dial := func() *websocket.Conn {
		ws, _, err := d.Dial(url, nil)
		if err != nil {
			b.Fatal(err)
		}
		send(b, ws, `{"id":1,"watch":{"selector":{"resource":{"version":"v1","resource":"count-1"}}}}`)
		read(b, ws) // the channel's opening
		read(b, ws) // its event
		return ws
	}
	dial().Close() // the TLS session cache, the handler's first allocations
	base := liveheap.Bytes()
	open := make([]*websocket.Conn, conns)
	for i := range open {
		open[i] = dial()
	}
	b.ReportMetric(float64(int64(liveheap.Bytes())-int64(base))/conns, "B/conn")
	var wg sync.WaitGroup
	for _, ws := range open {
		wg.Go(func() { ws.Close() })
	}
	wg.Wait()
}
