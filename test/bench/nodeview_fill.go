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
// Nodes, registered and heartbeat) and whose change log fillChangeLogs
// fills.
var filledTypes = []string{"pods", "nodes"}

// fillChangeLogs writes logSize changes of each of filledTypes before
// either side starts, to one filler object of each (a Node of no
// kubelet, a pod bound to it), and waits until the hub has taken them
// in.
//
// The hub's change log keeps the last logSize changes of each type
// whatever the cluster's size: a fixed cost, which in a cluster of a few
// hundred pods or more is full, so that a node more adds none of it (its
// changes take the place of older ones). At this scenario's 100 pods the
// log was not full, and each side's figure per node carried every
// version of its pods and Nodes; filled first, the figure is what a
// node costs a replica of any size: its changes replace the filler's,
// and what that gives back (a small version, its metadata) is all the
// log's share. Both sides pay it alike.
func (s *sideRun) fillChangeLogs(ctx context.Context, logSize int) error {
	name := s.ns + "-filler"
	labels := map[string]string{benchLabel: s.ns}
	if _, err := s.admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the filler node: %w", err)
	}
	if _, err := s.admin.CoreV1().Pods(s.ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "filler", Labels: labels},
		Spec: corev1.PodSpec{NodeName: name, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the filler pod: %w", err)
	}
	before, err := s.hubChanges(ctx)
	if err != nil {
		return err
	}
	s.env.progressf("nodeview: filling the hub's change logs of %v with %d changes each", filledTypes, logSize)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range logSize {
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"bench.nodeproxy.io/fill":"%d"}}}`, i)
		g.Go(func() error {
			if _, err := s.admin.CoreV1().Nodes().Patch(gctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("fill the nodes' change log: %w", err)
			}
			if _, err := s.admin.CoreV1().Pods(s.ns).Patch(gctx, "filler", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
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
			if d[t] < float64(logSize) {
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
