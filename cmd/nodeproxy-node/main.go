// Command nodeproxy-node is `nodeproxy node` alone: the endpoint in front
// of a node's kubelet, and its install and uninstall. It runs on every
// node, so it links nothing of the hub or the benchmarks (see
// docs/architecture.md for what that saves).
package main

import (
	"os"
	"runtime/debug"

	"k8s.io/component-base/cli"

	npcli "github.com/nodeproxy/nodeproxy/internal/cli"
	"github.com/nodeproxy/nodeproxy/internal/nodecmd"
)

// gcPercent is the endpoint's GOGC unless the environment sets one. Its
// live heap is a few megabytes, so a collection is cheap, and the RSS of
// every node is what half Go's default headroom saves
// (docs/benchmarks.md, "The node endpoint's footprint").
const gcPercent = 50

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	cmd := nodecmd.NewCommand("nodeproxy-node")
	cmd.Version = npcli.Version()
	os.Exit(cli.Run(cmd))
}
