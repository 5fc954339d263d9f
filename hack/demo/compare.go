package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/nodeproxy/nodeproxy/test/bench"
)

// compare runs the same kubelets behind endpoints and straight on
// kube-apiserver (bench.CompareKubelets) on the demo's control plane and
// hub, and prints the table it ends on.
func (d *demo) compare(ctx context.Context) error {
	l, window := d.o.compareLoad, d.o.compareWindow
	d.step("The same kubelets behind node endpoints and straight on kube-apiserver, side by side (--compare=false skips it)")
	d.say("%d hollow kubelets, each with %d pod(s) mounting %d secrets and configmaps of their own, one way then the other;", l.Nodes, l.PodsPerNode, l.ObjectsPerPod)
	d.say("each way is measured over %s from its pods' creation, the kubelets already Ready", window)
	env := &bench.Env{Kubelets: l, Progress: prefixed("    ", d.out)}
	c, err := bench.CompareKubelets(ctx, env, d.target, window)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("comparison: %w", err)
	}
	// tabwriter writes cell by cell: indent the finished table line by
	// line.
	var table strings.Builder
	if err := c.WriteTable(&table); err != nil {
		return err
	}
	fmt.Fprintln(d.out)
	for line := range strings.Lines(table.String()) {
		if line = strings.TrimRight(line, "\n"); line != "" {
			line = "    " + line
		}
		fmt.Fprintln(d.out, line)
	}
	d.say("(each window also holds the pods' creation and status, the same both ways; what the objects alone cost kube-apiserver,")
	d.say("over rounds with and without them, is make bench's kubelets scenario: docs/benchmarks.md, \"Real kubelets behind node endpoints\")")
	return nil
}
