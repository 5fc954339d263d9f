// Command demo is `make demo`: a local control plane with the hub in
// front of it; three nodes, each a hollow kubelet and a hollow
// kube-proxy (real kubelet and kube-proxy code) behind its node endpoint,
// which keeps a copy of the node's view; kube-apiserver's long-running
// requests from those nodes (none); a Secret rotation reaching the pods'
// files; a pod deleted; an outage of kube-apiserver and the hub, through
// which a restarted kubelet runs its pod from the copy, and everything
// caught up after; the Pod API; and, last, the same kubelets straight on
// kube-apiserver and behind endpoints side by side. It runs until Ctrl-C
// (or --for, or --exit) and leaves nothing running.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nodeproxy/nodeproxy/test/bench"
)

func main() {
	o, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, o); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

type demoOptions struct {
	nodeproxy string
	// exit ends the demo after its last step; duration, when not 0,
	// after that long; neither waits for Ctrl-C.
	exit     bool
	duration time.Duration
	// podAPI shows the Pod API's bootstrap after the outage.
	podAPI bool
	// compare runs the side-by-side table of compareLoad's kubelets,
	// each way over a window of compareWindow.
	compare       bool
	compareLoad   bench.KubeletLoad
	compareWindow time.Duration
}

// parseFlags reads the demo's command line into options, every error at
// once.
func parseFlags(fs *flag.FlagSet, args []string) (demoOptions, error) {
	var o demoOptions
	fs.StringVar(&o.nodeproxy, "nodeproxy", "bin/nodeproxy", "the nodeproxy binary to run (its node endpoints run nodeproxy-node beside it, when there is one)")
	fs.BoolVar(&o.exit, "exit", false, "end after the last step instead of waiting for Ctrl-C")
	fs.DurationVar(&o.duration, "for", 0, "after the last step, stay up this long to look around, then end; 0 waits for Ctrl-C")
	fs.BoolVar(&o.podAPI, "pod-api", true, "show the Pod API: a pod posted on a node with no API server, handed over once there is one")
	fs.BoolVar(&o.compare, "compare", true, "end on the same kubelets straight on kube-apiserver and behind node endpoints, side by side")
	fs.IntVar(&o.compareLoad.Nodes, "compare-nodes", 6, "hollow kubelets each way in the comparison")
	fs.IntVar(&o.compareLoad.PodsPerNode, "compare-pods", 1, "pods on each kubelet in the comparison")
	fs.IntVar(&o.compareLoad.ObjectsPerPod, "compare-objects", 50, "secrets and configmaps (half each) each pod of the comparison mounts, its own")
	fs.DurationVar(&o.compareWindow, "compare-window", 15*time.Second, "how long each way is measured, from its pods' creation")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if o.duration < 0 {
		errs = append(errs, fmt.Errorf("--for must not be negative, got %s", o.duration))
	}
	if o.exit && o.duration > 0 {
		errs = append(errs, errors.New("--exit and --for both say when to end: give one"))
	}
	for _, f := range []struct {
		name  string
		value int
	}{{"--compare-nodes", o.compareLoad.Nodes}, {"--compare-pods", o.compareLoad.PodsPerNode}, {"--compare-objects", o.compareLoad.ObjectsPerPod}} {
		if f.value < 1 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", f.name, f.value))
		}
	}
	if o.compareWindow < 5*time.Second {
		errs = append(errs, fmt.Errorf("--compare-window must be at least 5s (the pods must start within it), got %s", o.compareWindow))
	}
	return o, errors.Join(errs...)
}
