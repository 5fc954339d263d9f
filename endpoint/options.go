package endpoint

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"

	_ "k8s.io/component-base/logs/json/register" // --logging-format=json

	"github.com/nodeproxy/nodeproxy/nodecopy/disk"
)

func init() {
	// The logging flags consult these gates; nodeproxy-node links nothing
	// else that registers them.
	utilruntime.Must(logsapi.AddFeatureGates(utilfeature.DefaultMutableFeatureGate))
}

// DefaultSecurePort is where `nodeproxy node` listens by default: next to
// the ports of the node's other components (kubelet 10250, kube-proxy
// 10256), and free on a kubeadm node.
const DefaultSecurePort = 10262

// DefaultOfflineMaxAge is --offline-max-age's default (docs/operations.md,
// "Offline"): the copy holds what the node could read when it went
// offline, which its running pods already have; a day covers an outage,
// an upgrade gone wrong or a partition over a night, and bounds how long
// a node starts pods from a state nobody could have changed.
const DefaultOfflineMaxAge = 24 * time.Hour

// Options are the flags of `nodeproxy node`.
type Options struct {
	NodeName string

	BindAddress string
	SecurePort  int
	// CertDir holds a generated serving certificate and its CA when no
	// certificate is given.
	CertDir             string
	TLSCertFile, TLSKey string
	ClientCAFile        string
	Kubeconfig          string
	HubURL, HubCAFile   string
	HubThroughAPIServer bool
	// OfflineMaxAge bounds the age of the copy served offline.
	OfflineMaxAge time.Duration
	// NodeView keeps a copy of the node's view; NodeViewDir persists
	// it; NodeViewKeyFile seals it.
	NodeView                     bool
	NodeViewDir, NodeViewKeyFile string
	// MetricsBindAddress is host:port for scrapers; empty for none.
	MetricsBindAddress string
	// GCPercent and MemoryLimit (a quantity, "0" for none) set the Go
	// collector, as GOGC and GOMEMLIMIT would.
	GCPercent   int
	MemoryLimit string
	Logs        *logsapi.LoggingConfiguration
}

// NewOptions returns the defaults, those of a kubeadm node.
func NewOptions() *Options {
	return &Options{
		BindAddress:   "127.0.0.1",
		SecurePort:    DefaultSecurePort,
		CertDir:       "/var/lib/nodeproxy/pki",
		ClientCAFile:  "/etc/kubernetes/pki/ca.crt",
		Kubeconfig:    "/etc/kubernetes/kubelet-direct.conf",
		HubURL:        "https://nodeproxy.nodeproxy.svc:443",
		OfflineMaxAge: DefaultOfflineMaxAge,
		// tmpfs: docs/operations.md, "Secrets at rest on the node".
		NodeView:    true,
		NodeViewDir: "/run/nodeproxy/node-view",
		GCPercent:   DefaultGCPercent,
		MemoryLimit: "0",
		Logs:        logsapi.NewLoggingConfiguration(),
	}
}

// Flags returns the flags in named sections.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	fs := fss.FlagSet("node")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName,
		"The node this endpoint stands for: only system:node:<node-name> is served. Default: the host name, lower-cased, as the kubelet's default.")

	fs = fss.FlagSet("secure serving")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress,
		"Address to listen on. The kubelet reaches the endpoint on the node itself; a wider address exposes nothing more (callers need the node's certificate) but is rarely wanted.")
	fs.IntVar(&o.SecurePort, "secure-port", o.SecurePort, "Port to serve HTTPS on; the kubelet's kubeconfig names https://127.0.0.1:<port>.")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "Serving certificate for 127.0.0.1 and localhost. Without it, one is generated into --cert-dir.")
	fs.StringVar(&o.TLSKey, "tls-private-key-file", o.TLSKey, "Key of --tls-cert-file.")
	fs.StringVar(&o.CertDir, "cert-dir", o.CertDir,
		"Where a generated serving certificate (serving.crt, serving.key) and the CA that signed it (ca.crt, which the kubelet's kubeconfig names) are kept.")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile,
		"The cluster's client CA: callers must present a certificate it signed, for system:node:<node-name>.")

	fs = fss.FlagSet("kube-apiserver")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig,
		"The kubelet's kubeconfig to kube-apiserver (its address and CA, and the kubelet's rotating client certificate, "+
			"usually /var/lib/kubelet/pki/kubelet-client-current.pem, re-read when the kubelet rotates it). "+
			"The endpoint reaches kube-apiserver and the hub as the kubelet.")

	fs = fss.FlagSet("hub")
	fs.StringVar(&o.HubURL, "hub-url", o.HubURL,
		"The hub (nodeproxy serve), reached directly, so that kube-apiserver carries no long-running request for this node. Empty: no hub, everything goes to kube-apiserver.")
	fs.StringVar(&o.HubCAFile, "hub-ca-file", o.HubCAFile,
		"The CA of the hub's serving certificate, and of nothing else (cert-manager's nodeproxy-ca in the shipped manifests). Required with --hub-url. "+
			"Not the cluster's CA: on kubeadm clusters it also signs kubelet serving certificates for names a node chooses, so a node could pose as the hub; the endpoint refuses to start with it.")
	fs.BoolVar(&o.HubThroughAPIServer, "hub-through-apiserver", o.HubThroughAPIServer,
		"Reach the hub through kube-apiserver's aggregator (bulk.k8s.io) instead of --hub-url: no Service route needed, at the cost of one long-running request per node on kube-apiserver.")

	fs = fss.FlagSet("offline")
	fs.DurationVar(&o.OfflineMaxAge, "offline-max-age", o.OfflineMaxAge,
		"How long after the node lost both the hub and kube-apiserver the endpoint still answers the kubelet's reads from its copy of the node's view "+
			"(the node's pods, their secrets and configmaps, its Node, the cluster's services), so that a kubelet restarted meanwhile starts its pods. "+
			"Measured on the monotonic clock. Past it, reads fail as they would without the endpoint. 0: never.")
	fs.BoolVar(&o.NodeView, "node-view", o.NodeView,
		"Keep a live copy of the node's view (everything the node may read, one hub channel) and serve the kubelet's reads from it. "+
			"false: one hub channel or bulk get per kubelet read, and nothing served offline.")
	fs.StringVar(&o.NodeViewDir, "node-view-dir", o.NodeViewDir,
		"Where the copy of the node's view is persisted (root-only, one file, replaced atomically), so that a restarted endpoint, or kubelet, starts from it during an outage. "+
			"The default is on tmpfs, like the kubelet's secret volumes: it survives restarts, not a reboot. A directory on disk survives a reboot and keeps the node's secrets at rest there: "+
			"see docs/operations.md, \"Secrets at rest on the node\", and --node-view-key-file. Empty: not persisted.")
	fs.StringVar(&o.NodeViewKeyFile, "node-view-key-file", o.NodeViewKeyFile,
		"A 32-byte key (raw, or base64), readable by root alone, that seals the persisted copy with AES-256-GCM. A copy not sealed with it is refused at start.")

	fs = fss.FlagSet("metrics")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress,
		"host:port (for example 0.0.0.0:10263) to serve /metrics on, over TLS, to callers with a bearer token that kube-apiserver authenticates (TokenReview) "+
			"and allows to get the non-resource path /metrics (SubjectAccessReview), as Prometheus scrapes a kubelet. "+
			"Empty: /metrics is served only on --secure-port, to the node's own certificate.")

	fs = fss.FlagSet("memory")
	fs.IntVar(&o.GCPercent, "gc-percent", o.GCPercent,
		"The Go collector's GOGC: it collects once the heap has grown by this percentage over what the last collection kept. "+
			"The endpoint keeps a few megabytes live and allocates little, so a collection is short and a low percentage saves memory on every node at little CPU (docs/operations.md, \"The node endpoint's memory\"). "+
			"-1 turns the collector off until --memory-limit is reached. The environment's GOGC, when set, wins.")
	fs.StringVar(&o.MemoryLimit, "memory-limit", o.MemoryLimit,
		"The Go runtime's soft memory limit (GOMEMLIMIT), a quantity such as 230Mi: near it the collector runs more often and returns freed memory, "+
			"rather than the endpoint being killed at its container's limit. Set it under that limit (nodeproxy node install's static pod: 90% of its 256Mi). "+
			"It does not count the binary's own pages. 0: none. The environment's GOMEMLIMIT, when set, wins.")

	logsapi.AddFlags(o.Logs, fss.FlagSet("logging"))
	return fss
}

// Complete fills what depends on the host.
func (o *Options) Complete() error {
	if o.NodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--node-name not given and the host name is unknown: %w", err)
		}
		o.NodeName = strings.ToLower(h)
	}
	return nil
}

// Validate returns every problem at once.
func (o *Options) Validate() error {
	var errs []error
	if o.SecurePort <= 0 || o.SecurePort > 65535 {
		errs = append(errs, fmt.Errorf("--secure-port must be between 1 and 65535, got %d", o.SecurePort))
	}
	if net.ParseIP(o.BindAddress) == nil {
		errs = append(errs, fmt.Errorf("--bind-address must be an IP address, got %q", o.BindAddress))
	}
	if o.MetricsBindAddress != "" {
		if _, port, err := net.SplitHostPort(o.MetricsBindAddress); err != nil {
			errs = append(errs, fmt.Errorf("--metrics-bind-address must be host:port: %w", err))
		} else if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
			errs = append(errs, fmt.Errorf("--metrics-bind-address port must be between 1 and 65535, got %q", port))
		}
	}
	if (o.TLSCertFile == "") != (o.TLSKey == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file must be given together"))
	}
	if o.NodeViewKeyFile != "" && o.NodeViewDir == "" {
		errs = append(errs, errors.New("--node-view-key-file needs --node-view-dir: there is nothing to seal"))
	}
	if o.OfflineMaxAge < 0 {
		errs = append(errs, fmt.Errorf("--offline-max-age must not be negative, got %s", o.OfflineMaxAge))
	}
	if o.TLSCertFile == "" && o.CertDir == "" {
		errs = append(errs, errors.New("--cert-dir is required when no --tls-cert-file is given"))
	}
	if o.ClientCAFile == "" {
		errs = append(errs, errors.New("--client-ca-file is required: without it no caller can be authenticated"))
	}
	if o.Kubeconfig == "" {
		errs = append(errs, errors.New("--kubeconfig is required: the endpoint reaches kube-apiserver as the kubelet"))
	}
	if o.HubThroughAPIServer && o.HubURL != NewOptions().HubURL && o.HubURL != "" {
		errs = append(errs, errors.New("--hub-url and --hub-through-apiserver exclude each other"))
	}
	if !o.HubThroughAPIServer && o.HubURL != "" && o.HubCAFile == "" {
		errs = append(errs, errors.New("--hub-ca-file is required with --hub-url: the hub is verified against a CA of its own, "+
			"not the cluster's (which signs kubelet serving certificates too); or --hub-url= for no hub"))
	}
	if err := o.validateMemory(); err != nil {
		errs = append(errs, err)
	}
	if err := logsapi.Validate(o.Logs, utilfeature.DefaultFeatureGate, nil); len(err) > 0 {
		errs = append(errs, err.ToAggregate())
	}
	return errors.Join(errs...)
}

// Config reads the files the options name and returns the endpoint's
// configuration, generating a serving certificate if it has none.
func (o *Options) Config() (Config, string, error) {
	upstream, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return Config{}, "", fmt.Errorf("--kubeconfig %s: %w", o.Kubeconfig, err)
	}
	if upstream.CertFile == "" && len(upstream.CertData) == 0 {
		return Config{}, "", fmt.Errorf("--kubeconfig %s has no client certificate: the endpoint must reach kube-apiserver as the kubelet", o.Kubeconfig)
	}
	cfg := Config{NodeName: o.NodeName, APIServer: upstream, ClientCAFile: o.ClientCAFile,
		ServingCertFile: o.TLSCertFile, ServingKeyFile: o.TLSKey, OfflineMaxAge: offlineMaxAge(o.OfflineMaxAge),
		NodeViewDir: o.NodeViewDir, NoNodeView: !o.NodeView}
	if o.NodeViewKeyFile != "" {
		if cfg.NodeViewKey, err = disk.ReadKeyFile(o.NodeViewKeyFile); err != nil {
			return Config{}, "", fmt.Errorf("--node-view-key-file: %w", err)
		}
	}
	switch {
	case o.HubThroughAPIServer:
		cfg.Hub = rest.CopyConfig(upstream)
	case o.HubURL != "":
		if err := o.checkHubCA(upstream); err != nil {
			return Config{}, "", err
		}
		cfg.Hub = rest.CopyConfig(upstream)
		cfg.Hub.Host = o.HubURL
		cfg.Hub.CAFile, cfg.Hub.CAData = o.HubCAFile, nil
	}
	if cfg.ServingCertFile == "" {
		if cfg.ServingCertFile, cfg.ServingKeyFile, err = ensureServingCert(o.CertDir); err != nil {
			return Config{}, "", err
		}
	}
	return cfg, net.JoinHostPort(o.BindAddress, strconv.Itoa(o.SecurePort)), nil
}

// offlineMaxAge is the flag's value as Config takes it: 0, never, is
// negative there.
func offlineMaxAge(flag time.Duration) time.Duration {
	if flag == 0 {
		return -1
	}
	return flag
}

// ensureServingCert generates, once, a CA and a serving certificate for
// 127.0.0.1, ::1 and localhost into dir: ca.crt is what the kubelet's
// kubeconfig names as its server's CA. Kept across restarts, so the
// kubeconfig written at install stays valid.
func ensureServingCert(dir string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, "serving.crt"), filepath.Join(dir, "serving.key")
	if _, err := os.Stat(certFile); err == nil {
		return certFile, keyFile, nil
	}
	chain, key, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, nil)
	if err != nil {
		return "", "", fmt.Errorf("generate a serving certificate: %w", err)
	}
	certs, err := certutil.ParseCertsPEM(chain)
	if err != nil || len(certs) < 2 {
		return "", "", fmt.Errorf("generated serving certificate has no CA (%d certificates): %v", len(certs), err)
	}
	caPEM, err := certutil.EncodeCertificates(certs[len(certs)-1])
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("--cert-dir: %w", err)
	}
	// The key first and the certificate last: a crash between them leaves
	// no certificate, and the next start generates both again.
	if err := keyutil.WriteKey(keyFile, key); err != nil {
		return "", "", err
	}
	if err := certutil.WriteCert(filepath.Join(dir, "ca.crt"), caPEM); err != nil {
		return "", "", err
	}
	if err := certutil.WriteCert(certFile, chain); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// checkHubCA refuses a --hub-ca-file that holds a CA of the cluster: the
// one kube-apiserver is verified by (the kubeconfig's) or the client CA.
// Either may sign certificates a node can obtain (kubeadm's cluster CA
// signs kubelet serving certificates from CSRs whose DNS names the node
// picks), and the endpoint would take such a certificate for the hub's.
// Only a CA of the hub's own makes the hub's certificate the hub's.
func (o *Options) checkHubCA(upstream *rest.Config) error {
	hub, err := certutil.CertsFromFile(o.HubCAFile)
	if err != nil {
		return fmt.Errorf("--hub-ca-file %s: %w", o.HubCAFile, err)
	}
	type clusterCA struct {
		name string
		load func() ([]*x509.Certificate, error)
	}
	cas := []clusterCA{{"--client-ca-file " + o.ClientCAFile, func() ([]*x509.Certificate, error) { return certutil.CertsFromFile(o.ClientCAFile) }}}
	if upstream.CAFile != "" {
		cas = append(cas, clusterCA{"--kubeconfig's CA " + upstream.CAFile, func() ([]*x509.Certificate, error) { return certutil.CertsFromFile(upstream.CAFile) }})
	}
	if len(upstream.CAData) > 0 {
		cas = append(cas, clusterCA{"--kubeconfig's CA", func() ([]*x509.Certificate, error) { return certutil.ParseCertsPEM(upstream.CAData) }})
	}
	for _, ca := range cas {
		certs, err := ca.load()
		if err != nil {
			continue // not this check's to report: the flag's own use does
		}
		for _, h := range hub {
			for _, c := range certs {
				if bytes.Equal(h.Raw, c.Raw) {
					return fmt.Errorf("--hub-ca-file %s holds %q, which is also %s: that CA signs certificates nodes can obtain, "+
						"so a node could pose as the hub; give the hub a CA of its own (docs/operations.md, \"Installing the node endpoint\")",
						o.HubCAFile, h.Subject.CommonName, ca.name)
				}
			}
		}
	}
	return nil
}
