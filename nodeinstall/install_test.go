package nodeinstall

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/nodeproxy/nodeproxy/endpoint"
)

// kubeadmKubeletConf is what kubeadm writes for a kubelet: the CA inline,
// the rotating certificate by path.
const kubeadmKubeletConf = `apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
    server: https://10.0.0.1:6443
  name: default-cluster
contexts:
- context:
    cluster: default-cluster
    namespace: default
    user: default-auth
  name: default-context
current-context: default-context
preferences: {}
users:
- name: default-auth
  user:
    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem
    client-key: /var/lib/kubelet/pki/kubelet-client-current.pem
`

// node is a kubeadm node's files under a temporary root, with a kubelet
// whose restarts are counted and an endpoint whose readiness the test sets.
type node struct {
	cfg      Config
	restarts int
	ready    error
}

func newNode(t *testing.T) *node {
	t.Helper()
	n := &node{}
	n.cfg = DefaultConfig()
	n.cfg.Root = t.TempDir()
	n.cfg.NodeName, n.cfg.Image = "node-a", "registry.example/nodeproxy:v1"
	n.cfg.ReadyTimeout = 2 * time.Second
	n.cfg.RestartKubelet = func(context.Context) error { n.restarts++; return nil }
	n.cfg.Ready = func(context.Context) error { return n.ready }
	n.write(t, n.cfg.KubeletKubeconfig, kubeadmKubeletConf)
	// The ConfigMap nodeproxy-hub-ca as the DaemonSet mounts it.
	n.cfg.HubCAFile = filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(n.cfg.HubCAFile, []byte(hubCA), 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// hubCA stands for the hub's CA certificate: install copies it, it does
// not parse it.
const hubCA = "-----BEGIN CERTIFICATE-----\nhub\n-----END CERTIFICATE-----\n"

func (n *node) write(t *testing.T, path, data string) {
	t.Helper()
	p := n.cfg.host(path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (n *node) read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(n.cfg.host(path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (n *node) exists(path string) bool {
	_, err := os.Stat(n.cfg.host(path))
	return err == nil
}

// kubeletServer is the server the kubelet's kubeconfig names, and its CA file.
func (n *node) kubeletServer(t *testing.T) (server, ca string) {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(n.cfg.host(n.cfg.KubeletKubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	cluster, user, err := current(kc)
	if err != nil {
		t.Fatal(err)
	}
	if user.ClientCertificate != "/var/lib/kubelet/pki/kubelet-client-current.pem" {
		t.Errorf("the kubelet's user changed: %+v", user)
	}
	return cluster.Server, cluster.CertificateAuthority
}

func TestInstallAndUninstall(t *testing.T) {
	n := newNode(t)
	ctx := context.Background()
	if err := Install(ctx, n.cfg); err != nil {
		t.Fatal(err)
	}
	if got := n.read(t, n.cfg.DirectKubeconfig); got != kubeadmKubeletConf {
		t.Errorf("kept kubeconfig differs from the kubelet's:\n%s", got)
	}
	if server, ca := n.kubeletServer(t); server != "https://127.0.0.1:10262" || ca != "/var/lib/nodeproxy/pki/ca.crt" {
		t.Errorf("kubelet points at %s with CA %s", server, ca)
	}
	if n.restarts != 1 {
		t.Errorf("kubelet restarted %d times, want 1", n.restarts)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal([]byte(n.read(t, n.cfg.ManifestPath)), &pod); err != nil {
		t.Fatalf("static pod manifest: %v", err)
	}
	args := strings.Join(pod.Spec.Containers[0].Args, " ")
	for _, want := range []string{"--node-name=node-a", "--kubeconfig=/etc/kubernetes/kubelet-direct.conf", "--secure-port=10262", "--cert-dir=/var/lib/nodeproxy/pki",
		"--hub-ca-file=/var/lib/nodeproxy/pki/hub-ca.crt", "--memory-limit=230Mi"} {
		if !strings.Contains(args, want) {
			t.Errorf("static pod args %q lack %q", args, want)
		}
	}
	// The image's entrypoint, nodeproxy-node, takes them as they are.
	endpointFlags := pflag.NewFlagSet("nodeproxy-node", pflag.ContinueOnError)
	for _, set := range endpoint.NewOptions().Flags().FlagSets {
		endpointFlags.AddFlagSet(set)
	}
	if err := endpointFlags.Parse(pod.Spec.Containers[0].Args); err != nil || endpointFlags.NArg() > 0 {
		t.Errorf("nodeproxy-node refuses the static pod's args %q: %v (left over: %v)", args, err, endpointFlags.Args())
	}
	// The image runs as 65532; the kubelet's certificate is root's, 0600.
	if sc := pod.Spec.Containers[0].SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("static pod does not run as root, and could not read the kubelet's certificate: %+v", sc)
	}
	if !pod.Spec.HostNetwork || pod.Spec.Containers[0].Image != n.cfg.Image {
		t.Errorf("static pod: hostNetwork %v, image %s", pod.Spec.HostNetwork, pod.Spec.Containers[0].Image)
	}
	mounted := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		mounted[v.HostPath.Path] = true
	}
	if !mounted["/var/lib/kubelet/pki"] || !mounted["/etc/kubernetes/kubelet-direct.conf"] {
		t.Errorf("static pod mounts %v: want the kubelet's certificate directory and kept kubeconfig", mounted)
	}

	// The hub's CA, copied where the endpoint reads it (CertDir, mounted).
	if got := n.read(t, "/var/lib/nodeproxy/pki/hub-ca.crt"); got != hubCA {
		t.Errorf("the hub's CA on the node: %q, want %q", got, hubCA)
	}

	// Again: nothing changes, the kubelet is left alone.
	if err := Install(ctx, n.cfg); err != nil {
		t.Fatal(err)
	}
	if n.restarts != 1 {
		t.Errorf("a second install restarted the kubelet (%d restarts)", n.restarts)
	}

	// A new hub CA reaches the node, and changes the static pod, so that
	// the kubelet restarts the endpoint with it.
	before := n.read(t, n.cfg.ManifestPath)
	if err := os.WriteFile(n.cfg.HubCAFile, []byte(hubCA+hubCA), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Install(ctx, n.cfg); err != nil {
		t.Fatal(err)
	}
	if got := n.read(t, "/var/lib/nodeproxy/pki/hub-ca.crt"); got != hubCA+hubCA {
		t.Errorf("the new hub CA did not reach the node: %q", got)
	}
	if n.read(t, n.cfg.ManifestPath) == before {
		t.Error("a new hub CA left the static pod as it was: the endpoint would keep the old one")
	}

	if err := Uninstall(ctx, n.cfg); err != nil {
		t.Fatal(err)
	}
	if got := n.read(t, n.cfg.KubeletKubeconfig); got != kubeadmKubeletConf {
		t.Errorf("uninstall left the kubelet with:\n%s", got)
	}
	if n.exists(n.cfg.ManifestPath) || n.exists(n.cfg.DirectKubeconfig) {
		t.Errorf("uninstall left the static pod or the kept kubeconfig")
	}
	if n.restarts != 2 {
		t.Errorf("kubelet restarted %d times, want 2", n.restarts)
	}
	if err := Uninstall(ctx, n.cfg); err != nil {
		t.Errorf("uninstalling twice: %v", err)
	}
}

func TestInstallLeavesTheKubeletAloneUntilTheEndpointServes(t *testing.T) {
	n := newNode(t)
	n.ready = errors.New("connection refused")
	err := Install(context.Background(), n.cfg)
	if err == nil || !strings.Contains(err.Error(), "the kubelet still uses its own kubeconfig") {
		t.Fatalf("install with an endpoint that never serves: %v", err)
	}
	if got := n.read(t, n.cfg.KubeletKubeconfig); got != kubeadmKubeletConf || n.restarts != 0 {
		t.Errorf("kubelet touched (%d restarts):\n%s", n.restarts, got)
	}
}

// TestReconcileFailsSafe: the endpoint goes away after install; past the
// grace period the kubelet goes back to kube-apiserver, and to the
// endpoint again once it serves.
func TestReconcileFailsSafe(t *testing.T) {
	n := newNode(t)
	ctx := context.Background()
	if err := Install(ctx, n.cfg); err != nil {
		t.Fatal(err)
	}
	lastReady := time.Now()
	n.ready = errors.New("connection refused")
	if err := n.cfg.reconcileOnce(ctx, &lastReady, time.Hour); err != nil {
		t.Fatal(err)
	}
	if server, _ := n.kubeletServer(t); server != "https://127.0.0.1:10262" {
		t.Errorf("within the grace period the kubelet moved to %s", server)
	}
	if err := n.cfg.reconcileOnce(ctx, &lastReady, 0); err != nil {
		t.Fatal(err)
	}
	if got := n.read(t, n.cfg.KubeletKubeconfig); got != kubeadmKubeletConf {
		t.Errorf("past the grace period the kubelet still has:\n%s", got)
	}
	n.ready = nil
	if err := n.cfg.reconcileOnce(ctx, &lastReady, 0); err != nil {
		t.Fatal(err)
	}
	if server, _ := n.kubeletServer(t); server != "https://127.0.0.1:10262" {
		t.Errorf("with the endpoint back the kubelet points at %s", server)
	}
	if n.restarts != 3 {
		t.Errorf("kubelet restarted %d times, want 3 (install, fail-safe, back)", n.restarts)
	}
}

func TestBadInput(t *testing.T) {
	t.Run("fronted kubelet without the kept kubeconfig", func(t *testing.T) {
		n := newNode(t)
		if err := Install(context.Background(), n.cfg); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(n.cfg.host(n.cfg.DirectKubeconfig)); err != nil {
			t.Fatal(err)
		}
		err := Install(context.Background(), n.cfg)
		if err == nil || !strings.Contains(err.Error(), "restore it by hand") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("certificate inline", func(t *testing.T) {
		n := newNode(t)
		n.write(t, n.cfg.KubeletKubeconfig, strings.Replace(kubeadmKubeletConf,
			"client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem", "client-certificate-data: LS0tLQo=", 1))
		err := Install(context.Background(), n.cfg)
		if err == nil || !strings.Contains(err.Error(), "must name its client certificate by absolute path") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("invalid config", func(t *testing.T) {
		c := DefaultConfig()
		c.Port, c.KubeletKubeconfig = 0, "relative.conf"
		err := c.Validate()
		for _, want := range []string{"node name is required", "image is required", "relative.conf must be an absolute path", "port must be between", "restart the kubelet",
			"hub's CA file is required"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("validate: %v, want it to name %q", err, want)
			}
		}
	})
}
