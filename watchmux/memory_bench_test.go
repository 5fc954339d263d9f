package watchmux

import (
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// BenchmarkBytesPerConnection measures the live heap of an open, idle
// connection over TLS, both ends (client and server are in this
// process): each of 200 connections opens one channel, reads its one
// event and then waits. writes=pooled is the server as it runs, its
// connections' write buffers taken from a pool for each message;
// writes=held keeps each connection's buffer for its life, gorilla's
// default; the difference is the server's saving per idle connection.
//
//	go test ./watchmux -run '^$' -bench BytesPerConnection -benchtime 1x -count 3
func BenchmarkBytesPerConnection(b *testing.B) {
	for _, tc := range []struct {
		name string
		pool websocket.BufferPool
	}{{"pooled", &messageBuffers}, {"held", nil}} {
		b.Run("writes="+tc.name, func(b *testing.B) {
			for b.Loop() {
				benchmarkBytesPerConnection(b, tc.pool)
			}
		})
	}
}

func benchmarkBytesPerConnection(b *testing.B, pool websocket.BufferPool) {
	const conns = 200
	srv, hs, _ := startServer(b, DefaultOptions())
	srv.upgrader.WriteBufferPool = pool
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
	base := heapAfterGC()
	open := make([]*websocket.Conn, conns)
	for i := range open {
		open[i] = dial()
	}
	b.ReportMetric(float64(int64(heapAfterGC())-int64(base))/conns, "B/conn")
	var wg sync.WaitGroup
	for _, ws := range open {
		wg.Go(func() { ws.Close() })
	}
	wg.Wait()
}

func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
