package nodeinstall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
)

// Install puts the endpoint in front of the kubelet: it keeps the
// kubelet's kubeconfig, writes the static pod, waits for the endpoint to
// serve, then points the kubelet at it and restarts the kubelet. Run again,
// it changes only what differs. An endpoint that does not become ready
// leaves the kubelet as it was, and the error says so.
func Install(ctx context.Context, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	direct, err := c.ensureFiles()
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, time.Second, c.ReadyTimeout, true, func(ctx context.Context) (bool, error) {
		last = c.ready(ctx)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the endpoint did not become ready within %s (%v); the kubelet still uses its own kubeconfig", c.ReadyTimeout, last)
	}
	fronted, err := c.fronted(direct)
	if err != nil {
		return err
	}
	return c.pointKubeletAt(ctx, fronted)
}

// Uninstall points the kubelet back at kube-apiserver with its own
// kubeconfig, restarts it, and then removes the static pod and the kept
// copy, in that order, so the kubelet is never left without a way to
// kube-apiserver.
func Uninstall(ctx context.Context, c Config) error {
	if c.RestartKubelet == nil {
		return errors.New("a way to restart the kubelet is required")
	}
	original, err := os.ReadFile(c.host(c.DirectKubeconfig))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Never installed, or already uninstalled but for the manifest.
	case err != nil:
		return fmt.Errorf("read the kubelet's kept kubeconfig: %w", err)
	default:
		if err := c.pointKubeletAt(ctx, original); err != nil {
			return err
		}
	}
	for _, p := range []string{c.ManifestPath, c.DirectKubeconfig} {
		if err := os.Remove(c.host(p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", p, err)
		}
	}
	return nil
}

// Reconcile keeps the endpoint installed until ctx ends, checking every
// interval. While the endpoint serves, the kubelet uses it; when it has
// not answered for longer than grace, the kubelet goes back to its own
// kubeconfig until the endpoint answers again. A node never stays cut off
// from kube-apiserver because its endpoint is gone.
func Reconcile(ctx context.Context, c Config, interval, grace time.Duration) error {
	if err := c.Validate(); err != nil {
		return err
	}
	lastReady := time.Now()
	for {
		if err := c.reconcileOnce(ctx, &lastReady, grace); err != nil {
			klog.ErrorS(err, "Reconciling the node endpoint")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

func (c *Config) reconcileOnce(ctx context.Context, lastReady *time.Time, grace time.Duration) error {
	direct, err := c.ensureFiles()
	if err != nil {
		return err
	}
	fronted, err := c.fronted(direct)
	if err != nil {
		return err
	}
	current, err := os.ReadFile(c.host(c.KubeletKubeconfig))
	if err != nil {
		return fmt.Errorf("read the kubelet's kubeconfig: %w", err)
	}
	usesEndpoint := bytes.Equal(current, fronted)
	if err := c.ready(ctx); err == nil {
		*lastReady = time.Now()
		if !usesEndpoint {
			klog.InfoS("The node endpoint serves; pointing the kubelet at it", "endpoint", c.endpointURL())
			return c.pointKubeletAt(ctx, fronted)
		}
		return nil
	} else if usesEndpoint && time.Since(*lastReady) > grace {
		klog.ErrorS(err, "The node endpoint has not served for longer than the grace period; the kubelet goes back to kube-apiserver directly",
			"grace", grace)
		original, rerr := os.ReadFile(c.host(c.DirectKubeconfig))
		if rerr != nil {
			return fmt.Errorf("read the kubelet's kept kubeconfig: %w", rerr)
		}
		return c.pointKubeletAt(ctx, original)
	}
	return nil
}

// ensureFiles keeps the kubelet's own kubeconfig and writes the static
// pod; it returns the kept kubeconfig, serialized as clientcmd writes it.
func (c *Config) ensureFiles() (*clientcmdapi.Config, error) {
	direct, err := c.keepDirect()
	if err != nil {
		return nil, err
	}
	_, user, err := current(direct)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.DirectKubeconfig, err)
	}
	if user.ClientCertificate == "" || !filepath.IsAbs(user.ClientCertificate) {
		return nil, fmt.Errorf("%s: the user must name its client certificate by absolute path (the kubelet's rotating kubelet-client-current.pem), got %q",
			c.DirectKubeconfig, user.ClientCertificate)
	}
	var hubCA []byte
	if c.HubURL != "" {
		// Copied on every pass, so that a new CA reaches the node; the
		// static pod names its digest, so the kubelet restarts the
		// endpoint on it (client-go reads a CA file once).
		if hubCA, err = os.ReadFile(c.HubCAFile); err != nil {
			return nil, fmt.Errorf("the hub's CA: %w", err)
		}
		if _, err := writeIfChanged(c.host(c.hubCAFile()), hubCA, 0o644); err != nil {
			return nil, err
		}
	}
	manifest, err := c.staticPod(kubeletCertDir(user.ClientCertificate), hubCA)
	if err != nil {
		return nil, err
	}
	if _, err := writeIfChanged(c.host(c.ManifestPath), manifest, 0o600); err != nil {
		return nil, err
	}
	return direct, nil
}

// keepDirect copies the kubelet's kubeconfig aside, once, and returns it.
func (c *Config) keepDirect() (*clientcmdapi.Config, error) {
	kept := c.host(c.DirectKubeconfig)
	if _, err := os.Stat(kept); err == nil {
		return loadKubeconfig(kept)
	}
	orig := c.host(c.KubeletKubeconfig)
	kc, err := loadKubeconfig(orig)
	if err != nil {
		return nil, err
	}
	if cluster, _, err := current(kc); err == nil && cluster.Server == c.endpointURL() {
		return nil, fmt.Errorf("%s already points at the endpoint but %s, the kubelet's own kubeconfig, is missing: restore it by hand",
			c.KubeletKubeconfig, c.DirectKubeconfig)
	}
	b, err := os.ReadFile(orig)
	if err != nil {
		return nil, err
	}
	if _, err := writeIfChanged(kept, b, 0o600); err != nil {
		return nil, err
	}
	return kc, nil
}

// fronted is direct with its cluster's server and CA the endpoint's.
func (c *Config) fronted(direct *clientcmdapi.Config) ([]byte, error) {
	kc := direct.DeepCopy()
	name := kc.Contexts[kc.CurrentContext].Cluster
	cluster := kc.Clusters[name]
	cluster.Server = c.endpointURL()
	cluster.CertificateAuthority, cluster.CertificateAuthorityData = c.caFile(), nil
	cluster.TLSServerName = ""
	b, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, fmt.Errorf("the kubelet's kubeconfig for the endpoint: %w", err)
	}
	return b, nil
}

// pointKubeletAt writes the kubelet's kubeconfig and, if it changed,
// restarts the kubelet.
func (c *Config) pointKubeletAt(ctx context.Context, kubeconfig []byte) error {
	changed, err := writeIfChanged(c.host(c.KubeletKubeconfig), kubeconfig, 0o600)
	if err != nil || !changed {
		return err
	}
	if err := c.RestartKubelet(ctx); err != nil {
		return fmt.Errorf("restart the kubelet after rewriting %s: %w", c.KubeletKubeconfig, err)
	}
	return nil
}

func loadKubeconfig(path string) (*clientcmdapi.Config, error) {
	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("read kubeconfig %s: %w", path, err)
	}
	if _, _, err := current(kc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return kc, nil
}

// current returns the cluster and user of kc's current context.
func current(kc *clientcmdapi.Config) (*clientcmdapi.Cluster, *clientcmdapi.AuthInfo, error) {
	ctx, ok := kc.Contexts[kc.CurrentContext]
	if !ok {
		return nil, nil, fmt.Errorf("no current context %q", kc.CurrentContext)
	}
	cluster, ok := kc.Clusters[ctx.Cluster]
	if !ok {
		return nil, nil, fmt.Errorf("context %q names no cluster %q", kc.CurrentContext, ctx.Cluster)
	}
	user, ok := kc.AuthInfos[ctx.AuthInfo]
	if !ok {
		return nil, nil, fmt.Errorf("context %q names no user %q", kc.CurrentContext, ctx.AuthInfo)
	}
	return cluster, user, nil
}

// writeIfChanged replaces path with data, atomically (a temporary file in
// the same directory, then a rename), unless it already holds data.
func writeIfChanged(path string, data []byte, mode os.FileMode) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".")
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Close(); err != nil {
		return false, err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return false, fmt.Errorf("replace %s: %w", path, err)
	}
	return true, nil
}
