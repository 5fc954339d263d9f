package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/internal/workload"
)

var fanoutScenario = Scenario{
	Name: "fanout",
	Help: "nodes holding bulk watches on websockets: time for one update to reach every subscriber, sustained events/s, memory per channel",
	Run:  runFanout,
}

// WatchLoad is who watches in the fanout and revoke scenarios.
type WatchLoad struct {
	// Nodes hold one websocket each (at most the shape's nodes).
	Nodes int
	// ChannelsPerNode caps the channels of a node: one per secret and
	// configmap its pods use, first pod first.
	ChannelsPerNode int
	// ObjectSize is the bytes of data in each secret and configmap.
	ObjectSize int
	// Updates is how many updates of the most watched secret one
	// sustained round makes (under a channel's queue of 1024).
	Updates int
}

// DefaultWatchLoad is 500 nodes x 30 channels of 1 KiB objects.
func DefaultWatchLoad() WatchLoad {
	return WatchLoad{Nodes: 500, ChannelsPerNode: 30, ObjectSize: 1024, Updates: 500}
}

// subscription is one channel a node asks for.
type subscription struct {
	resource, namespace, name string
}

// subscriptions lists node n's channels: the secrets and configmaps its
// pods use, in pod order, without repeats, at most max.
func subscriptions(s workload.Shape, c *workload.Cluster, n, max int) []subscription {
	var out []subscription
	seen := map[subscription]bool{}
	for _, pod := range c.Pods[n*s.PodsPerNode : (n+1)*s.PodsPerNode] {
		for _, v := range pod.Spec.Volumes {
			var sub subscription
			switch {
			case v.Secret != nil:
				sub = subscription{"secrets", pod.Namespace, v.Secret.SecretName}
			case v.ConfigMap != nil:
				sub = subscription{"configmaps", pod.Namespace, v.ConfigMap.Name}
			default:
				continue
			}
			if !seen[sub] {
				seen[sub] = true
				out = append(out, sub)
				if len(out) == max {
					return out
				}
			}
		}
	}
	return out
}

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

func runFanout(ctx context.Context, env *Env) (*Result, error) {
	r := &Result{Scenario: "fanout"}
	load := env.Watch
	nodes := min(load.Nodes, env.Shape.Nodes)
	p, err := startInProcess(ctx, env.Cluster, load.ObjectSize)
	if err != nil {
		return nil, err
	}
	defer p.stop()

	subs := make([][]subscription, nodes)
	counts := map[subscription]int{}
	for n := range nodes {
		subs[n] = subscriptions(env.Shape, env.Cluster, n, load.ChannelsPerNode)
		for _, s := range subs[n] {
			if s.resource == "secrets" {
				counts[s]++
			}
		}
	}
	var target subscription
	for s, n := range counts {
		if n > counts[target] || (n == counts[target] && fmt.Sprint(s) < fmt.Sprint(target)) {
			target = s
		}
	}
	if counts[target] == 0 {
		return nil, fmt.Errorf("fanout: the watching nodes' pods use no secret: nothing to update")
	}

	bar := env.phase(nodes, "fanout: %d nodes connecting", nodes)
	base := heapInUse()
	dialer := websocket.Dialer{TLSClientConfig: p.TLS, Subprotocols: []string{v1alpha1.WatchSubprotocol}}
	clients := make([]*watchClient, nodes)
	for n := range clients {
		ws, _, err := dialer.DialContext(ctx, p.URL, http.Header{"X-Bench-Node": {workload.NodeName(n)}})
		if err != nil {
			return partialOr(ctx, r, fmt.Errorf("fanout: node %d: %w", n, err))
		}
		defer ws.Close()
		clients[n] = &watchClient{ws: ws, buf: make([]byte, 0, load.ObjectSize+512)}
		bar.Add(1)
	}
	bar.Done()
	connected := heapInUse()

	channels := 0
	bar = env.phase(nodes, "fanout: opening the channels (%d on %s/%s)", counts[target], target.namespace, target.name)
	var readers sync.WaitGroup
	defer readers.Wait()
	defer func() {
		for _, c := range clients {
			c.ws.Close()
		}
	}()
	for n, c := range clients {
		targetRequest := int64(-1)
		for i, s := range subs[n] {
			if s == target {
				targetRequest = int64(i)
			}
			req, _ := json.Marshal(v1alpha1.WatchRequest{ID: int64(i), Watch: &v1alpha1.Watch{Selector: v1alpha1.GetOperation{
				Resource:  metav1GVR(s.resource),
				Namespace: s.namespace,
				Options:   fieldSelector(s.name),
			}}})
			if err := c.ws.WriteMessage(websocket.TextMessage, req); err != nil {
				return partialOr(ctx, r, fmt.Errorf("fanout: node %d: %w", n, err))
			}
		}
		// Responses first: the channel of the target, and every refusal.
		for range subs[n] {
			data, err := readMessage(c.ws, &c.buf)
			if err != nil {
				return partialOr(ctx, r, fmt.Errorf("fanout: node %d: %w", n, err))
			}
			var msg v1alpha1.ServerMessage
			if err := json.Unmarshal(data, &msg); err != nil || msg.Response == nil {
				return nil, fmt.Errorf("fanout: node %d: expected a response, got %.200s", n, data)
			}
			if msg.Response.Error != nil {
				return nil, fmt.Errorf("fanout: node %d refused a channel it should have: %s", n, msg.Response.Error.Message)
			}
			if msg.Response.RequestID == targetRequest {
				c.target = msg.Response.Channel
			}
		}
		channels += len(subs[n])
		readers.Go(func() { c.read() })
		bar.Add(1)
	}
	bar.Done()
	opened := heapInUse()
	r.Figures = append(r.Figures,
		Figure{Name: "connections", Value: float64(nodes), Unit: ""},
		Figure{Name: "channels", Value: float64(channels), Unit: ""},
		Figure{Name: "heap per connection (both ends)", Value: float64(connected-base) / float64(nodes) / 1024, Unit: "KiB"},
		Figure{Name: "heap per idle channel", Value: float64(opened-connected) / float64(channels), Unit: "B"},
	)

	// One update at a time, until every subscriber has it.
	var subscribers []*watchClient
	for _, c := range clients {
		if c.target != 0 {
			subscribers = append(subscribers, c)
		}
	}
	var took []time.Duration
	env.progressf("fanout: single updates of %s/%s to %d subscribers", target.namespace, target.name, len(subscribers))
	deadline := time.Now().Add(env.PhaseDuration)
	for round := 0; round < 3 || time.Now().Before(deadline); round++ {
		if ctx.Err() != nil {
			break
		}
		want := make([]int64, len(subscribers))
		for i, c := range subscribers {
			want[i] = c.targetEvents.Load() + 1
		}
		start := time.Now()
		if err := p.updateSecret(target.namespace, target.name, load.ObjectSize, round); err != nil {
			return nil, err
		}
		if err := waitAll(ctx, subscribers, want); err != nil {
			return partialOr(ctx, r, err)
		}
		for _, c := range subscribers {
			took = append(took, time.Duration(c.lastTarget.Load()-start.UnixNano()))
		}
	}
	r.Latencies = append(r.Latencies, latencyOf(fmt.Sprintf("one update to all %d subscribers", len(subscribers)), took))

	// Sustained: rounds of back-to-back updates.
	env.progressf("fanout: rounds of %d back-to-back updates", load.Updates)
	var rates []float64
	deadline = time.Now().Add(env.PhaseDuration)
	for round := 0; round < 3 || time.Now().Before(deadline); round++ {
		if ctx.Err() != nil {
			break
		}
		want := make([]int64, len(subscribers))
		for i, c := range subscribers {
			want[i] = c.targetEvents.Load() + int64(load.Updates)
		}
		start := time.Now()
		for k := range load.Updates {
			if err := p.updateSecret(target.namespace, target.name, load.ObjectSize, 1000*(round+1)+k); err != nil {
				return nil, err
			}
		}
		if err := waitAll(ctx, subscribers, want); err != nil {
			return partialOr(ctx, r, err)
		}
		rates = append(rates, float64(len(subscribers)*load.Updates)/time.Since(start).Seconds())
	}
	if len(rates) > 0 {
		slices.Sort(rates)
		r.Figures = append(r.Figures, Figure{Name: "events delivered, median round", Value: rates[len(rates)/2], Unit: "/s"})
	}
	var errs int64
	for _, c := range clients {
		errs += c.errors.Load()
	}
	if errs > 0 {
		return nil, fmt.Errorf("fanout: %d channels ended with an ERROR during the run", errs)
	}
	runtime.KeepAlive(clients)
	if ctx.Err() != nil {
		return partial(ctx, r, context.Cause(ctx))
	}
	return r, nil
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

// waitAll waits until each subscriber has read want[i] target events, for
// at most a minute.
func waitAll(ctx context.Context, subscribers []*watchClient, want []int64) error {
	deadline := time.Now().Add(time.Minute)
	for i, c := range subscribers {
		for c.targetEvents.Load() < want[i] {
			if err := ctx.Err(); err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("fanout: subscriber %d read %d of %d events within a minute", i, c.targetEvents.Load(), want[i])
			}
			time.Sleep(200 * time.Microsecond)
		}
	}
	return nil
}

// partialOr returns r marked partial if ctx has ended, else err alone.
func partialOr(ctx context.Context, r *Result, err error) (*Result, error) {
	if ctx.Err() != nil {
		return partial(ctx, r, context.Cause(ctx))
	}
	return nil, err
}
