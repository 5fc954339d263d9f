package nodeinstall

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Config says where the node's files are and what to install. Paths are
// the node's, as the kubelet and the static pod see them; Root is where
// this process sees the node's filesystem (/ on the node, the hostPath
// mount in a DaemonSet pod).
type Config struct {
	Root string

	// KubeletKubeconfig is the file the kubelet reads (--kubeconfig),
	// rewritten to point at the endpoint.
	KubeletKubeconfig string
	// DirectKubeconfig keeps the kubelet's own kubeconfig: the endpoint
	// reaches kube-apiserver with it, and Uninstall puts it back.
	DirectKubeconfig string
	// ManifestPath is the static pod's manifest, in the kubelet's
	// staticPodPath.
	ManifestPath string
	// CertDir is where the endpoint keeps its serving certificate and CA.
	CertDir string
	// ClientCAFile is the cluster's client CA.
	ClientCAFile string

	NodeName string
	// Image is the node endpoint's: its entrypoint is nodeproxy-node
	// (make image's nodeproxy-node:dev), which the static pod's
	// arguments are for.
	Image  string
	Port   int
	HubURL string
	// HubCAFile is the hub's own CA certificate as this process reads it
	// (the DaemonSet mounts the ConfigMap nodeproxy-hub-ca), copied into
	// CertDir on the node for the endpoint's --hub-ca-file. Required
	// with HubURL: the endpoint does not verify the hub against the
	// cluster's CA.
	HubCAFile string

	// RestartKubelet makes the kubelet read its kubeconfig again.
	RestartKubelet func(context.Context) error
	// Ready reports whether the endpoint serves; nil asks its /readyz,
	// trusting the CA in CertDir.
	Ready func(context.Context) error
	// ReadyTimeout bounds Install's wait for the endpoint.
	ReadyTimeout time.Duration
}

// DefaultConfig is a kubeadm node's layout.
func DefaultConfig() Config {
	return Config{
		Root:              "/",
		KubeletKubeconfig: "/etc/kubernetes/kubelet.conf",
		DirectKubeconfig:  "/etc/kubernetes/kubelet-direct.conf",
		ManifestPath:      "/etc/kubernetes/manifests/nodeproxy-node.yaml",
		CertDir:           "/var/lib/nodeproxy/pki",
		ClientCAFile:      "/etc/kubernetes/pki/ca.crt",
		Port:              10262,
		HubURL:            "https://nodeproxy.nodeproxy.svc:443",
		ReadyTimeout:      2 * time.Minute,
	}
}

// Validate names every missing or contradictory setting.
func (c *Config) Validate() error {
	var errs []error
	for _, f := range []struct{ name, value string }{
		{"root", c.Root}, {"kubelet kubeconfig", c.KubeletKubeconfig}, {"direct kubeconfig", c.DirectKubeconfig},
		{"manifest path", c.ManifestPath}, {"cert dir", c.CertDir}, {"client CA file", c.ClientCAFile},
		{"node name", c.NodeName}, {"image", c.Image},
	} {
		if f.value == "" {
			errs = append(errs, fmt.Errorf("%s is required", f.name))
		}
	}
	for _, p := range []string{c.KubeletKubeconfig, c.DirectKubeconfig, c.ManifestPath, c.CertDir, c.ClientCAFile} {
		if p != "" && !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("%s must be an absolute path on the node", p))
		}
	}
	if c.KubeletKubeconfig != "" && c.KubeletKubeconfig == c.DirectKubeconfig {
		errs = append(errs, errors.New("the kubelet's kubeconfig and the kept direct one must be different files"))
	}
	if c.Port <= 0 || c.Port > 65535 {
		errs = append(errs, fmt.Errorf("port must be between 1 and 65535, got %d", c.Port))
	}
	if c.RestartKubelet == nil {
		errs = append(errs, errors.New("a way to restart the kubelet is required"))
	}
	if c.HubURL != "" && c.HubCAFile == "" {
		errs = append(errs, errors.New("the hub's CA file is required with a hub URL: the endpoint verifies the hub against the hub's own CA"))
	}
	return errors.Join(errs...)
}

// host is p as this process sees it.
func (c *Config) host(p string) string { return filepath.Join(c.Root, p) }

// endpointURL is where the kubelet reaches the endpoint.
func (c *Config) endpointURL() string { return "https://127.0.0.1:" + strconv.Itoa(c.Port) }

// hubCAFile is the hub's CA on the node, as the endpoint reads it.
func (c *Config) hubCAFile() string { return filepath.Join(c.CertDir, "hub-ca.crt") }

// caFile is the endpoint's CA, which it writes into CertDir.
func (c *Config) caFile() string { return filepath.Join(c.CertDir, "ca.crt") }

// ready asks the endpoint's /readyz, as the kubelet will reach it.
func (c *Config) ready(ctx context.Context) error {
	if c.Ready != nil {
		return c.Ready(ctx)
	}
	ca, err := os.ReadFile(c.host(c.caFile()))
	if err != nil {
		return fmt.Errorf("the endpoint's CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("%s holds no certificate", c.caFile())
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.endpointURL()+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("the endpoint at %s: %w", c.endpointURL(), err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the endpoint at %s is not ready: %s", c.endpointURL(), resp.Status)
	}
	return nil
}
