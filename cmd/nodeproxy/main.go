// Command nodeproxy is the per-cluster cache and authorizer that stands
// between kubelets and kube-apiserver. See the README and docs/.
package main

import (
	"os"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"

	npcli "github.com/nodeproxy/nodeproxy/internal/cli"
	"github.com/nodeproxy/nodeproxy/internal/nodecmd"
)

func main() {
	os.Exit(cli.Run(newRootCommand()))
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "nodeproxy",
		Short: "Node-scoped cache, authorizer and bulk watch for kubelets",
		Long: "nodeproxy keeps one per-cluster cache of the objects kubelets read, knows which node may " +
			"read which Secret, ConfigMap, PersistentVolumeClaim, PersistentVolume and ServiceAccount " +
			"through the pods bound to it, and serves them to nodes from memory.",
		SilenceUsage: true,
		Version:      npcli.Version(),
	}
	// The benchmark is nodeproxy-bench, a binary of its own: what only it
	// needs (plotting, fonts, synthetic clusters) stays out of the hub.
	root.AddCommand(newServeCommand(), nodecmd.NewCommand("node"))
	return root
}
