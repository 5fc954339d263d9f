package main

import (
	"fmt"
	"net"

	"github.com/spf13/cobra"
	genericapiserver "k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/endpoint"
)

func newNodeCommand() *cobra.Command {
	o := endpoint.NewOptions()
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run the node endpoint in front of this node's kubelet",
		Long: "Run the node endpoint: the kubelet's kubeconfig points at it (https://127.0.0.1:<secure-port>). " +
			"It serves the kubelet's reads of its secrets, configmaps, pods and Node from the hub over one bulk watch, " +
			"and passes everything else to kube-apiserver, as the kubelet, with the kubelet's own certificate.",
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
			cfg, addr, err := o.Config()
			if err != nil {
				return err
			}
			e, err := endpoint.New(cfg)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", addr, err)
			}
			klog.InfoS("Serving the node endpoint", "node", cfg.NodeName, "address", ln.Addr().String(), "apiserver", cfg.APIServer.Host, "hub", hubHost(cfg))
			return e.Run(genericapiserver.SetupSignalContext(), ln)
		},
	}
	return withFlags(cmd, o.Flags())
}

func hubHost(cfg endpoint.Config) string {
	if cfg.Hub == nil {
		return "none"
	}
	return cfg.Hub.Host
}
