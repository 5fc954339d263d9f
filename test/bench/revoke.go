package bench

import (
	"context"
	"fmt"
	"strings"
	"time"
)

var revokeScenario = Scenario{
	Name:       "revoke",
	Help:       "pods deleted at --revoke-rate: time from the informer event to the node's ERROR 403 on the channel of the secret it no longer reaches (with --kubeconfig: from the deletion request to kube-apiserver)",
	Run:        runRevoke,
	RunAgainst: runRevokeAgainst,
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

	var watchers fleet
	defer watchers.close()
	if err := watchers.dial(ctx, env, p, nodes, 1024, "revoke: %d nodes each watching a secret only its first pod uses", nodes); err != nil {
		return interrupted(ctx, r, fmt.Errorf("revoke: %w", err))
	}
	clients := watchers.clients
	for n, c := range clients {
		first := env.Cluster.Pods[n*env.Shape.PodsPerNode]
		own := subscription{resource: "secrets", namespace: first.Namespace}
		for _, v := range first.Spec.Volumes {
			if v.Secret != nil && !strings.HasSuffix(v.Secret.SecretName, "-shared") {
				own.name = v.Secret.SecretName
				break
			}
		}
		if own.name == "" {
			return nil, fmt.Errorf("revoke: pods use no secret of their own (--secrets-per-pod=0): nothing to revoke")
		}
		if err := c.subscribe([]subscription{own}, own); err != nil {
			return interrupted(ctx, r, fmt.Errorf("revoke: node %d: %w", n, err))
		}
		watchers.read(c)
	}

	bar := env.phase(nodes, "revoke: deleting %d pods at %d/s", nodes, env.RevokeRate)
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
	forbidden := make([]*heard, len(deleted))
	for n := range deleted {
		forbidden[n] = &clients[n].forbidden
	}
	waitErr := waitHeard(ctx, nil, forbidden, func(int) int64 { return 1 })
	var took []time.Duration
	for n, at := range deleted {
		if forbidden[n].events.Load() > 0 {
			took = append(took, forbidden[n].since(at))
		}
	}
	r.Figures = append(r.Figures, Figure{Name: "pods deleted", Value: float64(len(deleted)), Unit: ""},
		Figure{Name: "deletion rate achieved", Value: float64(len(deleted)) / time.Since(start).Seconds(), Unit: "/s"})
	r.Latencies = append(r.Latencies, latencyOf("pod deletion to ERROR 403", took))
	if waitErr != nil {
		return interrupted(ctx, r, fmt.Errorf("revoke: %w", waitErr))
	}
	if ctx.Err() != nil {
		return interrupted(ctx, r, ctx.Err())
	}
	return r, nil
}
