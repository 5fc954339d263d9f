// Package nodecmd is the `node` command and its install and uninstall
// subcommands, shared by nodeproxy and the lean nodeproxy-node binary,
// which links nothing of the hub or the benchmarks.
package nodecmd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/endpoint"
	"github.com/nodeproxy/nodeproxy/internal/cli"
	"github.com/nodeproxy/nodeproxy/nodeinstall"
	"github.com/nodeproxy/nodeproxy/podapi"
)

// NewCommand returns the node command, named use.
func NewCommand(use string) *cobra.Command {
	o := endpoint.NewOptions()
	pods := podapi.NewOptions()
	cmd := &cobra.Command{
		Use:   use,
		Short: "Run the node endpoint in front of this node's kubelet",
		Long: "Run the node endpoint: the kubelet's kubeconfig points at it (https://127.0.0.1:<secure-port>). " +
			"It serves the kubelet's reads of its secrets, configmaps, pods and Node from the hub over one bulk watch, " +
			"and passes everything else to kube-apiserver, as the kubelet, with the kubelet's own certificate.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Complete(); err != nil {
				return err
			}
			if err := errors.Join(o.Validate(), pods.Validate()); err != nil {
				return fmt.Errorf("invalid flags: %w", err)
			}
			if err := logsapi.ValidateAndApply(o.Logs, utilfeature.DefaultFeatureGate); err != nil {
				return err
			}
			// Both binaries run the endpoint with the same collector
			// settings: the flags, unless the environment sets GOGC or
			// GOMEMLIMIT.
			klog.InfoS("Go memory settings", o.Memory().Apply(os.Getenv)...)
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
			g, ctx := errgroup.WithContext(cli.SignalContext())
			g.Go(func() error { return e.Run(ctx, ln) })
			if o.MetricsBindAddress != "" {
				mln, err := net.Listen("tcp", o.MetricsBindAddress)
				if err != nil {
					return fmt.Errorf("listen on --metrics-bind-address %s: %w", o.MetricsBindAddress, err)
				}
				klog.InfoS("Serving metrics to scrapers kube-apiserver allows", "address", mln.Addr().String())
				g.Go(func() error { return e.RunMetrics(ctx, mln) })
			}
			if pods.Enabled {
				run, err := startPodAPI(pods, cfg.NodeName)
				if err != nil {
					return err
				}
				g.Go(func() error { return run(ctx) })
			}
			return g.Wait()
		},
	}
	fss := o.Flags()
	pods.AddFlags(&fss)
	cmd = cli.WithFlags(cmd, fss)
	cmd.AddCommand(newNodeInstallCommand(), newNodeUninstallCommand())
	return cmd
}

func newNodeInstallCommand() *cobra.Command {
	o := nodeinstall.NewOptions()
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Put the node endpoint in front of this node's kubelet, as a static pod (run by the DaemonSet)",
		Long: "Keep the kubelet's kubeconfig, write the endpoint's static pod manifest, wait until the endpoint serves, " +
			"then point the kubelet at it and restart the kubelet. With --keep-reconciling, keep it so, and send the kubelet " +
			"back to kube-apiserver whenever the endpoint stops serving for longer than --grace.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Complete()
			if err := o.Validate(); err != nil {
				return fmt.Errorf("invalid flags: %w", err)
			}
			// With --keep-reconciling it stays on every node too: the
			// endpoint's collector setting, without its flags.
			endpoint.Memory{GCPercent: endpoint.DefaultGCPercent}.Apply(os.Getenv)
			ctx := cli.SignalContext()
			if err := nodeinstall.Install(ctx, o.Config); err != nil {
				return err
			}
			klog.InfoS("Node endpoint installed", "node", o.NodeName)
			if !o.Reconcile {
				return nil
			}
			return nodeinstall.Reconcile(ctx, o.Config, o.ReconcileInterval, o.Grace)
		},
	}
	return cli.WithFlags(cmd, o.Flags())
}

func newNodeUninstallCommand() *cobra.Command {
	o := nodeinstall.NewOptions()
	var stay bool
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Point this node's kubelet back at kube-apiserver and remove the node endpoint",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Complete()
			ctx := cli.SignalContext()
			if err := nodeinstall.Uninstall(ctx, o.Config); err != nil {
				return err
			}
			klog.InfoS("Node endpoint uninstalled; the kubelet uses its own kubeconfig again")
			if stay {
				<-ctx.Done()
			}
			return nil
		},
	}
	fss := o.Flags()
	fss.FlagSet("uninstall").BoolVar(&stay, "stay", false,
		"After uninstalling, keep running until terminated, as a DaemonSet's pod must to count as done.")
	return cli.WithFlags(cmd, fss)
}

// startPodAPI opens the Pod API's store, socket and pod source, and
// returns what serves them.
func startPodAPI(o *podapi.Options, node string) (func(context.Context) error, error) {
	cfg, err := o.Config(node)
	if err != nil {
		return nil, err
	}
	api, err := podapi.New(cfg)
	if err != nil {
		return nil, err
	}
	sock, err := podapi.ListenUnix(o.Socket)
	if err != nil {
		return nil, err
	}
	src, err := net.Listen("tcp", o.KubeletAddress)
	if err != nil {
		sock.Close()
		return nil, fmt.Errorf("listen on --pod-api-kubelet-address %s: %w", o.KubeletAddress, err)
	}
	klog.InfoS("Serving the Pod API", "socket", o.Socket, "allowedUIDs", o.AllowedUIDs,
		"kubeletSource", "http://"+src.Addr().String()+"/pods", "handover", cfg.Handover != nil)
	return func(ctx context.Context) error { return api.Run(ctx, sock, src) }, nil
}

func hubHost(cfg endpoint.Config) string {
	if cfg.Hub == nil {
		return "none"
	}
	return cfg.Hub.Host
}
