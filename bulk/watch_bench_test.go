package bulk

import (
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

var (
	benchConnections = flag.Int("watch-connections", 2000, "bulk watch benchmark: connections")
	benchChannels    = flag.Int("watch-channels", 30, "bulk watch benchmark: channels per connection")
)

// BenchmarkBulkWatch runs nodeproxy's watch path in-process over TLS on
// loopback: -watch-connections websockets (default 2,000), each with
// -watch-channels channels (default 30): one on a secret every connection
// watches (like a namespace's kube-root-ca.crt) and the others on secrets
// of its own. Clients are bare websockets that count what they read, so
// the heap figures are the server's plus a small fixed cost per client
// connection. It reports:
//
//   - heap-B/channel: heap added by opening the channels, per channel;
//
//   - heap-KiB/connection: heap added by the connections before any
//     channel (server and client ends);
//
//   - fanout-p50-ms, fanout-p99-ms: from an update of the shared secret
//     taken into the cache to its MODIFIED read by each connection;
//
//   - events/s: events delivered to the clients while the shared secret
//     changes as fast as one writer can change it (median of 5 rounds).
//
//     go test ./bulk -run '^$' -bench BulkWatch -benchtime 1x
func BenchmarkBulkWatch(b *testing.B) {
	for b.Loop() {
		benchmarkBulkWatch(b, *benchConnections, *benchChannels)
	}
}

// benchServer serves f's cache over bulk watch on a TLS test server until
// the benchmark ends. Requests are served as admin, or as the node named
// in the X-Bench-Node header (no authentication: this is in-process).
func benchServer(b *testing.B, f *fixture, conns int) (string, *tls.Config) {
	w := NewWatcher(f.getter, f.graph, DefaultWatcherOptions())
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	go w.Run(ctx)
	mux := watchmux.NewServer(w, watchmux.DefaultOptions())
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var u user.Info = admin
		if node := r.Header.Get("X-Bench-Node"); node != "" {
			u = &user.DefaultInfo{Name: "system:node:" + node, Groups: []string{user.NodesGroup}}
		}
		mux.ServeHTTP(rw, r.WithContext(request.WithUser(r.Context(), u)))
	}))
	hs.EnableHTTP2 = false
	hs.StartTLS()
	b.Cleanup(hs.Close)
	b.Cleanup(mux.Shutdown)
	tlsConfig := hs.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	tlsConfig.ClientSessionCache = tls.NewLRUClientSessionCache(conns)
	return "wss" + strings.TrimPrefix(hs.URL, "https") + watchmux.Path + "?watch=1", tlsConfig
}

// BenchmarkAccessLoss measures how soon a node hears it lost access: 500
// nodes each watch the secret of their one pod; the pods are deleted one
// after another, and each deletion is timed from the moment the cache
// takes it in to the moment the node's client reads ERROR 403.
//
//	go test ./bulk -run '^$' -bench AccessLoss -benchtime 1x
func BenchmarkAccessLoss(b *testing.B) {
	for b.Loop() {
		const nodes = 500
		f := newFixture(b, 4096)
		pods := make([]*corev1.Pod, nodes)
		for i := range pods {
			f.add(b, secret("a", fmt.Sprintf("s%d", i)))
			pods[i] = pod("a", fmt.Sprintf("p%d", i), fmt.Sprintf("n%d", i), fmt.Sprintf("s%d", i))
			f.add(b, pods[i])
		}
		url, tlsConfig := benchServer(b, f, nodes)
		d := websocket.Dialer{TLSClientConfig: tlsConfig, Subprotocols: []string{v1alpha1.WatchSubprotocol}}
		errored := make([]chan time.Time, nodes)
		for i := range nodes {
			ws, _, err := d.Dial(url, http.Header{"X-Bench-Node": {fmt.Sprintf("n%d", i)}})
			if err != nil {
				b.Fatal(err)
			}
			defer ws.Close()
			req := fmt.Sprintf(`{"id":1,"watch":{"selector":{"resource":{"version":"v1","resource":"secrets"},"namespace":"a","options":{"fieldSelector":"metadata.name=s%d","sendInitialEvents":false}}}}`, i)
			if err := ws.WriteMessage(websocket.TextMessage, []byte(req)); err != nil {
				b.Fatal(err)
			}
			if _, data, err := ws.ReadMessage(); err != nil || strings.Contains(string(data), "error") {
				b.Fatalf("node %d: %s %v", i, data, err)
			}
			errored[i] = make(chan time.Time, 1)
			go func() {
				for {
					_, data, err := ws.ReadMessage()
					if err != nil {
						return
					}
					if strings.Contains(string(data[:min(len(data), 40)]), `"ERROR"`) {
						errored[i] <- time.Now()
						return
					}
				}
			}()
		}
		var took []time.Duration
		for i, p := range pods {
			start := time.Now()
			if err := f.cache.Store(gvr("pods")).Delete(p); err != nil {
				b.Fatal(err)
			}
			select {
			case at := <-errored[i]:
				took = append(took, at.Sub(start))
			case <-time.After(10 * time.Second):
				b.Fatalf("node %d heard nothing within 10s of its pod's deletion", i)
			}
		}
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "revoke-p50-ms")
		b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "revoke-p99-ms")
	}
}

type benchClient struct {
	ws       *websocket.Conn
	modified atomic.Int64 // unix nanos of the shared secret's last MODIFIED
	events   atomic.Int64
	// lastError is the last ERROR event read, for the failure message.
	lastError atomic.Value
	// buf is reused for every message: the clients share the machine
	// with the server, and what they allocated per message (gorilla's
	// ReadMessage allocates each) was garbage the server's collector paid
	// for too, halving the delivered events/s.
	buf []byte
}

func benchmarkBulkWatch(b *testing.B, conns, perConn int) {
	f := newFixture(b, 4096)
	value := strings.Repeat("x", 1024)
	shared := &corev1.Secret{ObjectMeta: meta("kube-system", "shared"), Data: map[string][]byte{"ca.crt": []byte(value)}}
	f.add(b, shared)
	for i := range conns * (perConn - 1) {
		s := secret(fmt.Sprintf("ns%d", i%100), fmt.Sprintf("own-%d", i))
		s.Data = map[string][]byte{"data": []byte(value)}
		f.add(b, s)
	}
	url, tlsConfig := benchServer(b, f, conns)

	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	base := heap()
	clients := make([]*benchClient, conns)
	d := websocket.Dialer{TLSClientConfig: tlsConfig, Subprotocols: []string{v1alpha1.WatchSubprotocol}}
	for i := range clients {
		ws, _, err := d.Dial(url, nil)
		if err != nil {
			b.Fatalf("connection %d: %v", i, err)
		}
		clients[i] = &benchClient{ws: ws, buf: make([]byte, 0, 4096)}
	}
	connected := heap()

	// Open the channels, then read everything each connection gets.
	opened := sync.WaitGroup{}
	opened.Add(conns)
	var readers sync.WaitGroup
	for i, c := range clients {
		readers.Add(1)
		go func() {
			defer readers.Done()
			responses := 0
			buf := c.buf
			for {
				data, err := readInto(c.ws, buf)
				if err != nil {
					return
				}
				buf = data[:0]
				if data[2] == 'r' { // {"response":...
					if responses++; responses == perConn {
						opened.Done()
					}
					continue
				}
				c.events.Add(1)
				if bytes.Contains(data[:min(len(data), 40)], []byte(`"ERROR"`)) {
					c.lastError.Store(string(data))
				}
				if bytes.Contains(data[:min(len(data), 200)], []byte(`"name":"shared"`)) && bytes.Contains(data[:40], []byte("MODIFIED")) {
					c.modified.Store(time.Now().UnixNano())
				}
			}
		}()
		sel := func(id int, ns, name string) string {
			return fmt.Sprintf(`{"id":%d,"watch":{"selector":{"resource":{"version":"v1","resource":"secrets"},"namespace":%q,"options":{"fieldSelector":"metadata.name=%s","sendInitialEvents":false}}}}`, id, ns, name)
		}
		if err := c.ws.WriteMessage(websocket.TextMessage, []byte(sel(0, "kube-system", "shared"))); err != nil {
			b.Fatal(err)
		}
		for j := 1; j < perConn; j++ {
			k := i*(perConn-1) + j - 1
			if err := c.ws.WriteMessage(websocket.TextMessage, []byte(sel(j, fmt.Sprintf("ns%d", k%100), fmt.Sprintf("own-%d", k)))); err != nil {
				b.Fatal(err)
			}
		}
	}
	opened.Wait()
	withChannels := heap()
	b.ReportMetric(float64(int64(withChannels)-int64(connected))/float64(conns*perConn), "heap-B/channel")
	b.ReportMetric(float64(int64(connected)-int64(base))/float64(conns)/1024, "heap-KiB/connection")

	// Fan-out: one update of the shared secret, until every connection
	// has read it.
	var took []time.Duration
	for round := range 5 {
		for _, c := range clients {
			c.modified.Store(0)
		}
		update := &corev1.Secret{ObjectMeta: meta("kube-system", "shared"), Data: map[string][]byte{"ca.crt": []byte(value + fmt.Sprint(round))}}
		start := time.Now()
		f.add(b, update)
		deadline := time.Now().Add(30 * time.Second)
		for _, c := range clients {
			for c.modified.Load() == 0 {
				if time.Now().After(deadline) {
					b.Fatal("an update did not reach every connection within 30s")
				}
				time.Sleep(time.Millisecond)
			}
			took = append(took, time.Duration(c.modified.Load()-start.UnixNano()))
		}
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "fanout-p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "fanout-p99-ms")

	// Sustained: rounds of 500 updates of the shared secret, back to back
	// (fewer than a channel's queue holds, and than the change log
	// holds), each until every connection has read all of them. The
	// median round is reported: the machine is shared and one round is
	// a few seconds.
	const updates, rounds = 500, 5
	var rates []float64
	for round := range rounds {
		counts := make([]int64, len(clients))
		for i, c := range clients {
			counts[i] = c.events.Load()
		}
		start := time.Now()
		for k := range updates {
			update := &corev1.Secret{ObjectMeta: meta("kube-system", "shared"), Data: map[string][]byte{"ca.crt": []byte(value + fmt.Sprint("r", round, "u", k))}}
			f.add(b, update)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for i, c := range clients {
			for c.events.Load() < counts[i]+updates {
				if time.Now().After(deadline) {
					b.Fatalf("connection %d read %d of %d updates (last ERROR: %v)", i, c.events.Load()-counts[i], updates, c.lastError.Load())
				}
				time.Sleep(time.Millisecond)
			}
		}
		rates = append(rates, float64(conns*updates)/time.Since(start).Seconds())
	}
	slices.Sort(rates)
	b.ReportMetric(rates[len(rates)/2], "events/s")

	for _, c := range clients {
		c.ws.Close()
	}
	readers.Wait()
}

// readInto reads the next message into buf's storage (growing it when
// the message does not fit) and returns it.
func readInto(ws *websocket.Conn, buf []byte) ([]byte, error) {
	_, r, err := ws.NextReader()
	if err != nil {
		return nil, err
	}
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
