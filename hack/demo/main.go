// Command demo is `make demo`: a local control plane, nodeproxy serving in
// front of it, a small workload, nodes holding bulk watches while an admin
// changes what they may read, hollow kubelets behind node endpoints
// receiving a Secret's update, a pod posted to the Pod API of a node with
// no API server and handed over once there is one, then kube-apiserver's
// watches and nodeproxy's side by side at small scale, with the commands to look
// around. It runs until Ctrl-C (or --for) and leaves nothing running.
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
	var o demoOptions
	flag.StringVar(&o.nodeproxy, "nodeproxy", "bin/nodeproxy", "the nodeproxy binary to run")
	flag.DurationVar(&o.duration, "for", 0, "stop after this long; 0 runs until Ctrl-C")
	flag.BoolVar(&o.kubelets, "kubelets", true, "run hollow kubelets behind node endpoints and one straight on kube-apiserver, and show a Secret update reaching their files")
	flag.BoolVar(&o.podAPI, "pod-api", true, "run a node endpoint with the Pod API and a hollow kubelet with no API server: post a pod on its socket, see it run, then hand it over once kube-apiserver is reachable")
	flag.BoolVar(&o.compare, "compare", true, "after the tour, measure kube-apiserver's watches against nodeproxy's on the demo's control plane")
	nodes := flag.Int("compare-nodes", 50, "nodes in the comparison")
	watches := flag.Int("compare-watches", 20, "secrets each node watches in the comparison, one of them shared by its namespace")
	flag.Parse()
	var errs []error
	if flag.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected argument %q", flag.Arg(0)))
	}
	if o.duration < 0 {
		errs = append(errs, fmt.Errorf("--for must not be negative, got %s", o.duration))
	}
	if *nodes < 1 {
		errs = append(errs, fmt.Errorf("--compare-nodes must be positive, got %d", *nodes))
	}
	if *watches < 2 {
		errs = append(errs, fmt.Errorf("--compare-watches must be at least 2 (the shared secret and one of the node's own), got %d", *watches))
	}
	for _, err := range errs {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
	}
	if len(errs) > 0 {
		os.Exit(2)
	}
	o.shape = compareShape(*nodes, *watches)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

type demoOptions struct {
	nodeproxy string
	duration  time.Duration
	// kubelets runs hollow kubelets behind node endpoints after the watch tour.
	kubelets bool
	// podAPI shows the Pod API's bootstrap after the kubelets.
	podAPI bool
	// compare runs the comparison of shape after the watch tour.
	compare bool
	shape   bench.WatchShape
}
