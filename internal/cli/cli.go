// Package cli holds what nodeproxy's commands share: flags printed in
// named sections, and a signal context.
package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/term"
	"k8s.io/klog/v2"
)

// WithFlags adds the named flag sets to cmd, and has --help print them
// section by section, wrapped to the terminal.
func WithFlags(cmd *cobra.Command, fss cliflag.NamedFlagSets) *cobra.Command {
	for _, fs := range fss.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, fss, cols)
	return cmd
}

// SignalContext ends at the first SIGTERM or SIGINT, for a graceful stop;
// a second one exits at once, as k8s.io/apiserver's servers do, without
// linking the generic server into the commands that are not one.
func SignalContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-signals
		cancel()
		<-signals
		klog.Flush()
		os.Exit(1)
	}()
	return ctx
}
