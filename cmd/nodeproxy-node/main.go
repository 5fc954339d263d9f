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
// live heap is small (4 MB with a kubelet watching 100 objects), so a
// collection costs well under a millisecond, and half Go's default
// headroom kept its RSS about 1.5 MiB lower: 30.0-30.4 MiB against
// 31.0-33.0 MiB (two hollow kubelets, 100 objects each, bench kubelets).
// Most of the rest is the binary's own pages (18 MiB, file-backed).
const gcPercent = 50

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	cmd := nodecmd.NewCommand("nodeproxy-node")
	cmd.Version = npcli.Version()
	os.Exit(cli.Run(cmd))
}
