// Command nodeproxy-bench measures nodeproxy: scenarios on a synthetic
// cluster in this process, or against a cluster nodeproxy fronts. It is a
// binary of its own so that what only it needs (the plotting library and
// its fonts, the synthetic clusters, the local control plane) stays out of
// the hub and the node endpoint, which run on every replica and every
// node (see docs/architecture.md for what that saves).
package main

import (
	"os"

	"k8s.io/component-base/cli"

	npcli "github.com/nodeproxy/nodeproxy/internal/cli"
)

func main() {
	cmd := newBenchCommand()
	cmd.Version = npcli.Version()
	os.Exit(cli.Run(cmd))
}
