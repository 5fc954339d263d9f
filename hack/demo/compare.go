package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nodeproxy/nodeproxy/test/bench"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// compareShape is the apiserver comparison of `make bench` cut down to
// what a demo waits for: nodes each watching watches secrets (their own
// and their namespace's shared one). At the default 50 x 20 it takes
// about 12 s on this project's 2-core machine, mostly creating the
// objects, the two idle phases and the status quo's opening; 20 x 10
// takes half that but leaves the two ways within noise of each other.
func compareShape(nodes, watches int) bench.WatchShape {
	return bench.WatchShape{
		Nodes: nodes, SecretsPerNode: watches - 1, Namespaces: min(10, nodes),
		ObjectSize: 1024, SharedUpdates: 10, Idle: 2 * time.Second,
	}
}

// showComparison runs bench.CompareWatches against the demo's own control
// plane and nodeproxy, printing its progress as it goes and its table at
// the end.
func showComparison(ctx context.Context, cp *controlplane.ControlPlane, np *controlplane.Nodeproxy, shape bench.WatchShape) error {
	fmt.Println("    Status quo: every node watches each of its secrets on kube-apiserver, as kubelets do today (kube-apiserver")
	fmt.Println("    asking nodeproxy's webhook to authorize each); with nodeproxy: every node holds one websocket straight to")
	fmt.Println("    nodeproxy, which serves the same watches from its cache.")
	target, err := bench.LocalTarget(cp, np, nil)
	if err != nil {
		return err
	}
	r, err := bench.CompareWatches(ctx, target, shape, prefixed("    "))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("comparison: %w", err)
	}
	// tabwriter writes cell by cell: indent the finished table line by
	// line.
	var table strings.Builder
	if err := r.WriteTable(&table); err != nil {
		return err
	}
	fmt.Println()
	for line := range strings.Lines(table.String()) {
		if line = strings.TrimRight(line, "\n"); line != "" {
			line = "    " + line
		}
		fmt.Println(line)
	}
	return nil
}
