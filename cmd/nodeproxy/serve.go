package main

import (
	"fmt"
	"github.com/nodeproxy/nodeproxy/internal/cli"

	"github.com/spf13/cobra"
	genericapiserver "k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/nodeproxy/nodeproxy/hub"
)

func newServeCommand() *cobra.Command {
	o := hub.NewOptions()
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the nodeproxy server",
		Long: "Run the nodeproxy server: TLS on --secure-port, callers authenticated and authorized by " +
			"delegation to kube-apiserver, informers reading the cluster through --kubeconfig.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return fmt.Errorf("invalid flags: %w", err)
			}
			if err := logsapi.ValidateAndApply(o.Logs, utilfeature.DefaultFeatureGate); err != nil {
				return err
			}
			// The first SIGTERM or SIGINT starts a graceful shutdown; a second
			// one exits at once.
			ctx := genericapiserver.SetupSignalContext()
			cfg, err := o.Config(ctx)
			if err != nil {
				return err
			}
			srv, err := cfg.New()
			if err != nil {
				return err
			}
			return srv.Run(ctx)
		},
	}
	return cli.WithFlags(cmd, o.Flags())
}
