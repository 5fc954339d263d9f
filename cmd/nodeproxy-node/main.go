// Command nodeproxy-node is `nodeproxy node` alone: the endpoint in front
// of a node's kubelet, and its install and uninstall. It runs on every
// node, so it links nothing of the hub or the benchmarks (see
// docs/architecture.md for what that saves).
package main

import (
	"os"

	"k8s.io/component-base/cli"

	npcli "github.com/nodeproxy/nodeproxy/internal/cli"
	"github.com/nodeproxy/nodeproxy/internal/nodecmd"
)

func main() {
	cmd := nodecmd.NewCommand("nodeproxy-node")
	cmd.Version = npcli.Version()
	os.Exit(cli.Run(cmd))
}
