package bench

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/watchmux"
)

// The fanout and revoke scenarios against a cluster: the same questions
// as in-process, asked end to end. Every change is a write through
// kube-apiserver, reaches nodeproxy through its informers, and is read by
// nodes holding websockets through the Target's bulk endpoint (the
// aggregator, with --kubeconfig), so each time includes kube-apiserver,
// etcd and the watch that feeds nodeproxy's cache.

// watchWorkload builds shape's workload on t for a scenario and returns
// it with what removes it.
func watchWorkload(ctx context.Context, env *Env, t Target, scenario string, shape WatchShape) (*comparison, func(), error) {
	c, err := scenarioComparison(env, scenario, t, shape)
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() {
		if err := cleanUp(ctx, c.admin, c.prefix); err != nil {
			env.progressf("%s: %v", scenario, err)
		}
	}
	if err := c.setUp(ctx); err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("%s: %w", scenario, err)
	}
	return c, cleanup, nil
}

// openSynced opens c's bulk watches, counting their initial states in t
// and handing every other event to on, and waits until every channel has
// had its initial state. closeAll is never nil.
func (c *comparison) openSynced(ctx context.Context, t *tally, on func(node, secret int, ev watchmux.Event)) (closeAll func(), err error) {
	stop := c.follow(&t.synced, c.shape.Watches(), "%d nodes opening %d channels", c.shape.Nodes, c.shape.Watches())
	defer stop()
	closeAll, err = c.openBulkWatches(ctx, func(node, secret int, ev watchmux.Event) {
		if ev.Type == watch.Bookmark && strings.Contains(string(ev.Object), metav1.InitialEventsAnnotationKey) {
			t.synced.Add(1)
			return
		}
		on(node, secret, ev)
	}, t.fail)
	if err == nil {
		err = t.waitFor(ctx, "initial state", &t.synced, int64(c.shape.Watches()))
	}
	return closeAll, err
}

// runFanoutAgainst puts every watching node's pod in one namespace, so
// that all of them watch its shared secret, and updates that secret
// through kube-apiserver: one update at a time, each timed from the
// update's request until every node has read it; then rounds of
// back-to-back updates, whose rate the API's writes bound.
func runFanoutAgainst(ctx context.Context, env *Env, target Target) (*Result, error) {
	r := &Result{Scenario: "fanout"}
	shape := WatchShape{Nodes: env.Watch.Nodes, SecretsPerNode: env.Watch.ChannelsPerNode - 1, Namespaces: 1, ObjectSize: env.Watch.ObjectSize}
	c, cleanup, err := watchWorkload(ctx, env, target, "fanout", shape)
	if err != nil {
		return interrupted(ctx, r, err)
	}
	defer cleanup()

	nodes := newHeards(shape.Nodes)
	t := &tally{}
	closeAll, err := c.openSynced(ctx, t, func(node, secret int, ev watchmux.Event) {
		switch ev.Type {
		case watch.Modified:
			if secret == 0 { // the shared one: watched lists it first
				nodes[node].record()
			}
		case watch.Error:
			t.fail(fmt.Errorf("%s's channel %d: %s", c.nodeName(node), secret, ev.Status.Message))
		}
	})
	defer closeAll()
	if err != nil {
		return interrupted(ctx, r, fmt.Errorf("fanout: %w", err))
	}
	r.Figures = append(r.Figures, Figure{Name: "connections", Value: float64(shape.Nodes)}, Figure{Name: "channels", Value: float64(shape.Watches())})

	ns := c.namespace(0)
	update := func(value string) error { return c.updateSecret(ns, sharedSecret, value)(ctx) }
	env.progressf("fanout: single updates of %s/%s through kube-apiserver to %d subscribers", ns, sharedSecret, shape.Nodes)
	var took []time.Duration
	started := time.Now()
	for round := 0; round < 3 || time.Since(started) < env.PhaseDuration; round++ {
		start := time.Now()
		if err := update(fmt.Sprintf("single %d", round)); err != nil {
			return interrupted(ctx, r, fmt.Errorf("fanout: update: %w", err))
		}
		if err := waitHeard(ctx, t.failed, nodes, func(int) int64 { return int64(round + 1) }); err != nil {
			r.Latencies = append(r.Latencies, latencyOf(fmt.Sprintf("one update to all %d subscribers", shape.Nodes), took))
			return interrupted(ctx, r, fmt.Errorf("fanout: %w", err))
		}
		for _, h := range nodes {
			took = append(took, h.since(start))
		}
	}
	r.Latencies = append(r.Latencies, latencyOf(fmt.Sprintf("one update to all %d subscribers", shape.Nodes), took))

	env.progressf("fanout: %d back-to-back updates through kube-apiserver", env.Watch.Updates)
	base := nodes[0].events.Load()
	start := time.Now()
	for k := range env.Watch.Updates {
		if err := update(fmt.Sprintf("burst %d", k)); err != nil {
			return interrupted(ctx, r, fmt.Errorf("fanout: update: %w", err))
		}
	}
	wrote := time.Since(start)
	if err := waitHeard(ctx, t.failed, nodes, func(int) int64 { return base + int64(env.Watch.Updates) }); err != nil {
		return interrupted(ctx, r, fmt.Errorf("fanout: %w", err))
	}
	elapsed := time.Since(start)
	r.Figures = append(r.Figures,
		Figure{Name: "updates written through kube-apiserver", Value: float64(env.Watch.Updates) / wrote.Seconds(), Unit: "/s"},
		Figure{Name: "events delivered", Value: float64(shape.Nodes*env.Watch.Updates) / elapsed.Seconds(), Unit: "/s"},
	)
	return r, nil
}

// runRevokeAgainst gives each watching node a pod using a secret of its
// own, deletes those pods through kube-apiserver at RevokeRate per
// second, and times each from the deletion's request to the node reading
// ERROR 403 on that secret's channel.
func runRevokeAgainst(ctx context.Context, env *Env, target Target) (*Result, error) {
	r := &Result{Scenario: "revoke"}
	shape := WatchShape{Nodes: env.Watch.Nodes, SecretsPerNode: 1, Namespaces: min(10, env.Watch.Nodes), ObjectSize: env.Watch.ObjectSize}
	c, cleanup, err := watchWorkload(ctx, env, target, "revoke", shape)
	if err != nil {
		return interrupted(ctx, r, err)
	}
	defer cleanup()

	nodes := newHeards(shape.Nodes)
	t := &tally{}
	env.progressf("revoke: %d nodes each watching a secret only its pod uses", shape.Nodes)
	closeAll, err := c.openSynced(ctx, t, func(node, secret int, ev watchmux.Event) {
		switch {
		case ev.Type == watch.Error && (ev.Status == nil || ev.Status.Code != http.StatusForbidden):
			t.fail(fmt.Errorf("%s's channel %d: %v", c.nodeName(node), secret, ev.Status))
		case ev.Type == watch.Error && secret == 1: // its own; the shared one closes too
			nodes[node].record()
		}
	})
	defer closeAll()
	if err != nil {
		return interrupted(ctx, r, fmt.Errorf("revoke: %w", err))
	}

	bar := env.phase(shape.Nodes, "revoke: deleting %d pods through kube-apiserver at %d/s", shape.Nodes, env.RevokeRate)
	requested := make([]atomic.Int64, shape.Nodes)
	interval := time.Second / time.Duration(env.RevokeRate)
	deletes, gctx := errgroup.WithContext(ctx)
	deletes.SetLimit(32)
	start := time.Now()
	for n := range shape.Nodes {
		if wait := time.Until(start.Add(time.Duration(n) * interval)); wait > 0 {
			select {
			case <-gctx.Done():
			case <-time.After(wait):
			}
		}
		if gctx.Err() != nil {
			break
		}
		deletes.Go(func() error {
			requested[n].Store(time.Now().UnixNano())
			err := c.admin.CoreV1().Pods(c.namespace(n)).Delete(gctx, fmt.Sprintf("pod-%d", n), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			bar.Add(1)
			return err
		})
	}
	err = deletes.Wait()
	bar.Done()
	if err != nil {
		return interrupted(ctx, r, fmt.Errorf("revoke: delete: %w", err))
	}
	rate := float64(shape.Nodes) / time.Since(start).Seconds()
	waitErr := waitHeard(ctx, t.failed, nodes, func(int) int64 { return 1 })
	var took []time.Duration
	for i := range nodes {
		if at := nodes[i].at.Load(); at != 0 {
			took = append(took, time.Duration(at-requested[i].Load()))
		}
	}
	r.Figures = append(r.Figures, Figure{Name: "pods deleted", Value: float64(shape.Nodes)}, Figure{Name: "deletion rate achieved", Value: rate, Unit: "/s"})
	r.Latencies = append(r.Latencies, latencyOf("pod deletion request to ERROR 403", took))
	if waitErr != nil {
		return interrupted(ctx, r, fmt.Errorf("revoke: %w", waitErr))
	}
	return r, nil
}
