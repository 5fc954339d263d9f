package bench

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// filledTypes are the types whose changes a side's nodes make (their
// pods, written by the scheduler's stand-in and the kubelets; their
// Nodes, registered and heartbeat) and whose change logs fillChangeLogs
// fills.
var filledTypes = []string{"pods", "nodes"}

// makeFillers makes the objects fillChangeLogs writes: a Node of no
// kubelet, and a pod bound to it.
func (s *sideRun) makeFillers(ctx context.Context) error {
	labels := map[string]string{benchLabel: s.ns}
	if _, err := s.admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.fillerName(), Labels: labels}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the filler node: %w", err)
	}
	if _, err := s.admin.CoreV1().Pods(s.ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: s.fillerName(), Labels: labels},
		Spec: corev1.PodSpec{NodeName: s.fillerName(), AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the filler pod: %w", err)
	}
	return nil
}

func (s *sideRun) fillerName() string { return s.ns + "-filler" }

// fillChangeLogs writes n changes of each of filledTypes, to the
// fillers (makeFillers), and waits until the hub has taken them in.
//
// The hub's change log keeps the last --cache-log-size changes of each
// type whatever the cluster's size: a fixed cost, which a cluster of a
// few thousand pods keeps full, so that a node more adds nothing to it
// (its changes take the place of older ones, of its size). A side fills
// the logs just before each of its two readings of the hub's heap, so
// that both find them full of the fillers' changes and the difference
// is what its nodes cost a replica of any size: their objects, their
// graph entries, their views or channels, their connections; not the
// versions of their pods and Nodes that 100 pods would otherwise leave
// in a half-empty log (docs/benchmarks.md, "The node view and an
// outage": the figures before this, with them).
func (s *sideRun) fillChangeLogs(ctx context.Context, n int) error {
	before, err := s.hubChanges(ctx)
	if err != nil {
		return err
	}
	s.env.progressf("nodeview: filling the hub's change logs of %v with %d changes each", filledTypes, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range n {
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"bench.nodeproxy.io/fill":"%d"}}}`, i)
		g.Go(func() error {
			if _, err := s.admin.CoreV1().Nodes().Patch(gctx, s.fillerName(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("fill the nodes' change log: %w", err)
			}
			if _, err := s.admin.CoreV1().Pods(s.ns).Patch(gctx, s.fillerName(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("fill the pods' change log: %w", err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		now, err := s.hubChanges(ctx)
		if err != nil {
			return false, err
		}
		d := now.minus(before)
		for _, t := range filledTypes {
			if d[t] < float64(n) {
				return false, nil
			}
		}
		return true, nil
	})
}

// hubChanges are the changes the hub's cache has taken in, by resource
// (nodeproxy_cache_events_total).
func (s *sideRun) hubChanges(ctx context.Context) (requestCounts, error) {
	m, err := s.t.Nodeproxy.Metrics(ctx)
	if err != nil {
		return nil, fmt.Errorf("the hub's cache changes: %w", err)
	}
	return countsBy(m, "nodeproxy_cache_events_total", func(l map[string]string) string { return l["resource"] }), nil
}
