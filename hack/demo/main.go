// Command demo is `make demo`: a local control plane, nodeproxy serving in
// front of it, and a small workload, with the commands to look around.
// It runs until Ctrl-C (or --for) and leaves nothing running.
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
)

func main() {
	var o demoOptions
	flag.StringVar(&o.nodeproxy, "nodeproxy", "bin/nodeproxy", "the nodeproxy binary to run")
	flag.DurationVar(&o.duration, "for", 0, "stop after this long; 0 runs until Ctrl-C")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "demo: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	if o.duration < 0 {
		fmt.Fprintf(os.Stderr, "demo: --for must not be negative, got %s\n", o.duration)
		os.Exit(2)
	}
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
}
