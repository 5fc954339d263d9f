package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/internal/workload"
)

var revokeScenario = Scenario{
	Name: "revoke",
	Help: "pods deleted at --revoke-rate: time from the informer event to the node's ERROR 403 on the channel of the secret it no longer reaches",
	Run:  runRevoke,
}

// runRevoke gives each watching node one channel on a secret only its
// first pod uses, then deletes those pods at RevokeRate per second, timing
// each from the moment the deletion is handed to the cache (where an
// informer hands it) to the moment the node's client reads ERROR 403.
func runRevoke(ctx context.Context, env *Env) (*Result, error) {
	r := &Result{Scenario: "revoke"}
	load := env.Watch
	nodes := min(load.Nodes, env.Shape.Nodes)
	p, err := startInProcess(ctx, env.Cluster, load.ObjectSize)
	if err != nil {
		return nil, err
	}
	defer p.stop()

	bar := env.phase(nodes, "revoke: %d nodes each watching a secret only its first pod uses", nodes)
	dialer := websocket.Dialer{TLSClientConfig: p.TLS, Subprotocols: []string{v1alpha1.WatchSubprotocol}}
	clients := make([]*watchClient, 0, nodes)
	var readers sync.WaitGroup
	defer readers.Wait()
	defer func() {
		for _, c := range clients {
			c.ws.Close()
		}
	}()
	for n := range nodes {
		first := env.Cluster.Pods[n*env.Shape.PodsPerNode]
		var secret string
		for _, v := range first.Spec.Volumes {
			if v.Secret != nil && !strings.HasSuffix(v.Secret.SecretName, "-shared") {
				secret = v.Secret.SecretName
				break
			}
		}
		if secret == "" {
			return nil, fmt.Errorf("revoke: pods use no secret of their own (--secrets-per-pod=0): nothing to revoke")
		}
		ws, _, err := dialer.DialContext(ctx, p.URL, http.Header{"X-Bench-Node": {workload.NodeName(n)}})
		if err != nil {
			return partialOr(ctx, r, fmt.Errorf("revoke: node %d: %w", n, err))
		}
		c := &watchClient{ws: ws, buf: make([]byte, 0, 1024)}
		clients = append(clients, c)
		req, _ := json.Marshal(v1alpha1.WatchRequest{ID: 1, Watch: &v1alpha1.Watch{Selector: v1alpha1.GetOperation{
			Resource: metav1GVR("secrets"), Namespace: first.Namespace, Options: fieldSelector(secret),
		}}})
		if err := ws.WriteMessage(websocket.TextMessage, req); err != nil {
			return partialOr(ctx, r, fmt.Errorf("revoke: node %d: %w", n, err))
		}
		data, err := readMessage(ws, &c.buf)
		if err != nil {
			return partialOr(ctx, r, fmt.Errorf("revoke: node %d: %w", n, err))
		}
		var msg v1alpha1.ServerMessage
		if err := json.Unmarshal(data, &msg); err != nil || msg.Response == nil || msg.Response.Error != nil {
			return nil, fmt.Errorf("revoke: node %d: its channel on %s/%s was not opened: %.300s", n, first.Namespace, secret, data)
		}
		c.target = msg.Response.Channel
		readers.Go(func() { c.read() })
		bar.Add(1)
	}
	bar.Done()

	bar = env.phase(nodes, "revoke: deleting %d pods at %d/s", nodes, env.RevokeRate)
	defer bar.Done()
	interval := time.Second / time.Duration(env.RevokeRate)
	deleted := make([]time.Time, 0, nodes)
	start := time.Now()
	for n := range nodes {
		if ctx.Err() != nil {
			break
		}
		if wait := time.Until(start.Add(time.Duration(n) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		deleted = append(deleted, time.Now())
		if err := p.deletePod(env.Cluster.Pods[n*env.Shape.PodsPerNode]); err != nil {
			return nil, err
		}
		bar.Add(1)
	}
	var took []time.Duration
	deadline := time.Now().Add(time.Minute)
	for n, at := range deleted {
		for clients[n].forbiddenAt.Load() == 0 {
			if ctx.Err() != nil {
				r.Latencies = append(r.Latencies, latencyOf("pod deletion to ERROR 403", took))
				return partial(ctx, r, context.Cause(ctx))
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("revoke: node %d read no ERROR 403 within a minute of its pod's deletion", n)
			}
			time.Sleep(200 * time.Microsecond)
		}
		took = append(took, time.Duration(clients[n].forbiddenAt.Load()-at.UnixNano()))
	}
	r.Figures = append(r.Figures, Figure{Name: "pods deleted", Value: float64(len(deleted)), Unit: ""},
		Figure{Name: "deletion rate achieved", Value: float64(len(deleted)) / time.Since(start).Seconds(), Unit: "/s"})
	r.Latencies = append(r.Latencies, latencyOf("pod deletion to ERROR 403", took))
	if ctx.Err() != nil {
		return partial(ctx, r, context.Cause(ctx))
	}
	return r, nil
}
