package nodeinstall

import (
	"errors"
	"fmt"
	"time"

	cliflag "k8s.io/component-base/cli/flag"
)

// Options are the flags of `nodeproxy node install` and `uninstall`.
type Options struct {
	Config
	// KubeletUnit is restarted over systemd's bus, unless
	// RestartCommand is given.
	KubeletUnit    string
	RestartCommand []string
	// Reconcile keeps install running: see Reconcile.
	Reconcile         bool
	ReconcileInterval time.Duration
	Grace             time.Duration
}

// NewOptions returns a kubeadm node's defaults.
func NewOptions() *Options {
	return &Options{Config: DefaultConfig(), KubeletUnit: "kubelet.service", ReconcileInterval: 30 * time.Second, Grace: 2 * time.Minute}
}

// Flags returns the flags in named sections.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	fs := fss.FlagSet("host")
	fs.StringVar(&o.Root, "host-root", o.Root, "Where this process sees the node's filesystem: / on the node, the hostPath mount in a pod.")
	fs.StringVar(&o.KubeletKubeconfig, "kubelet-kubeconfig", o.KubeletKubeconfig, "The kubelet's --kubeconfig, pointed at the endpoint.")
	fs.StringVar(&o.DirectKubeconfig, "direct-kubeconfig", o.DirectKubeconfig, "Where the kubelet's own kubeconfig is kept: the endpoint uses it, uninstall restores it.")
	fs.StringVar(&o.ManifestPath, "manifest", o.ManifestPath, "The endpoint's static pod manifest, in the kubelet's staticPodPath.")
	fs.StringVar(&o.CertDir, "cert-dir", o.CertDir, "The endpoint's serving certificate and CA.")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile, "The cluster's client CA, which signed the kubelet's certificate.")
	fs.StringVar(&o.KubeletUnit, "kubelet-unit", o.KubeletUnit, "The kubelet's systemd unit, restarted over the system bus (mount /run/dbus/system_bus_socket).")
	fs.StringSliceVar(&o.RestartCommand, "restart-kubelet-command", o.RestartCommand, "A command (comma-separated argv) that restarts the kubelet, instead of --kubelet-unit.")

	fs = fss.FlagSet("endpoint")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "The node (from the downward API's spec.nodeName in a DaemonSet).")
	fs.StringVar(&o.Image, "image", o.Image, "The node endpoint's image, whose entrypoint is nodeproxy-node (make image's nodeproxy-node:dev), that the static pod runs: this DaemonSet's own.")
	fs.IntVar(&o.Port, "secure-port", o.Port, "The endpoint's port on 127.0.0.1.")
	fs.StringVar(&o.HubURL, "hub-url", o.HubURL, "The hub, as the endpoint reaches it. Empty: no hub.")
	fs.StringVar(&o.HubCAFile, "hub-ca-file", o.HubCAFile,
		"The hub's own CA certificate, as this process reads it (the ConfigMap nodeproxy-hub-ca, mounted); copied to <cert-dir>/hub-ca.crt on the node "+
			"for the endpoint's --hub-ca-file. Required with --hub-url.")
	fs.DurationVar(&o.ReadyTimeout, "ready-timeout", o.ReadyTimeout, "How long install waits for the endpoint before leaving the kubelet as it was.")

	fs = fss.FlagSet("reconcile")
	fs.BoolVar(&o.Reconcile, "keep-reconciling", o.Reconcile, "After installing, keep checking: past --grace without an answer from the endpoint, "+
		"point the kubelet back at kube-apiserver until the endpoint serves again.")
	fs.DurationVar(&o.ReconcileInterval, "reconcile-interval", o.ReconcileInterval, "How often to check.")
	fs.DurationVar(&o.Grace, "grace", o.Grace, "How long the endpoint may not answer before the kubelet goes back to kube-apiserver.")
	return fss
}

// Complete picks the way to restart the kubelet.
func (o *Options) Complete() {
	if len(o.RestartCommand) > 0 {
		o.RestartKubelet = RestartCommand(o.RestartCommand)
	} else if o.KubeletUnit != "" {
		o.RestartKubelet = RestartUnit(o.KubeletUnit)
	}
}

// Validate returns every problem at once.
func (o *Options) Validate() error {
	errs := []error{o.Config.Validate()}
	if o.Reconcile && (o.ReconcileInterval <= 0 || o.Grace <= 0) {
		errs = append(errs, fmt.Errorf("--reconcile-interval and --grace must be positive, got %s and %s", o.ReconcileInterval, o.Grace))
	}
	if o.ReadyTimeout <= 0 {
		errs = append(errs, errors.New("--ready-timeout must be positive"))
	}
	return errors.Join(errs...)
}
