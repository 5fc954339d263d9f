// Command nodeproxy is the per-cluster cache and authorizer that stands
// between kubelets and kube-apiserver. See the README and docs/.
package main

import (
	"os"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/term"
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
	}
	root.AddCommand(newServeCommand(), newNodeCommand(), newBenchCommand())
	return root
}

// withFlags adds the named flag sets to cmd, and has --help print them
// section by section, wrapped to the terminal.
func withFlags(cmd *cobra.Command, fss cliflag.NamedFlagSets) *cobra.Command {
	for _, fs := range fss.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, fss, cols)
	return cmd
}
