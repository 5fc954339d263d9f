package controlplane

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// readyTimeout bounds the wait for etcd and kube-apiserver. With warm
// binaries the pair is ready in about 3 s on two idle cores; a loaded CI
// machine running several test packages at once has been seen to need ten
// times that, so the bound is generous and the error names the laggard.
const readyTimeout = 90 * time.Second

// Options choose how the control plane is set up.
type Options struct {
	// Authorization is kube-apiserver's structured authorization
	// configuration (--authorization-config). Nil means Node then RBAC, the
	// kubeadm default. Put a Webhook authorizer first to ask nodeproxy.
	Authorization *apiserverv1.AuthorizationConfiguration

	// AuthorizationFor, when set, replaces Authorization: it is called
	// once the control plane's certificates exist and before
	// kube-apiserver starts, so it can mint the client certificate and
	// write the kubeconfig a webhook authorizer needs.
	AuthorizationFor func(*ControlPlane) (*apiserverv1.AuthorizationConfiguration, error)

	// ExtraAPIServerArgs are appended to kube-apiserver's command line.
	ExtraAPIServerArgs []string

	// Log receives progress: binary builds and the control plane's
	// addresses. Nil discards it.
	Log io.Writer
}

// ControlPlane is a running etcd and kube-apiserver on 127.0.0.1, each on a
// free port, with certificates made for this instance alone.
//
// Aggregation is always set up: kube-apiserver holds a front-proxy client
// certificate, and an APIService backed by a Service of type ExternalName
// with externalName "localhost" reaches a server on this machine at the
// port the APIService names.
type ControlPlane struct {
	// Dir holds certificates, configuration, etcd's data and both logs.
	Dir string
	// URL is kube-apiserver's address, https://127.0.0.1:<port>.
	URL string

	// ServingCA signs kube-apiserver's serving certificate.
	ServingCA *CA
	// ClientCA signs the client certificates kube-apiserver accepts.
	ClientCA *CA
	// HubCA, an intermediate of ServingCA, signs the serving
	// certificates of the hubs StartNodeproxy runs: clients of
	// ServingCA verify them, and node endpoints are given HubCA alone
	// (--hub-ca-file), as they must be a CA of the hub's own.
	HubCA *CA
	// FrontProxyCA signs FrontProxyClient, the certificate kube-apiserver
	// presents when it proxies to an aggregated server; such a server
	// trusts the X-Remote-* headers of requests that carry it.
	FrontProxyCA     *CA
	FrontProxyClient *KeyPair

	admin     *rest.Config
	etcd      *Process
	etcdURL   string
	apiserver *Process
	// apiserverBin and apiserverArgs start kube-apiserver again, the same
	// way, for RestartAPIServer.
	apiserverBin  string
	apiserverArgs []string
}

// Start builds the binaries if they are missing, starts etcd and
// kube-apiserver, and returns when kube-apiserver's /readyz says ok. On
// error nothing is left running.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	bins, err := EnsureBinaries(ctx, opts.Log)
	if err != nil {
		return nil, err
	}
	// FreePorts releases the ports it finds before etcd and kube-apiserver
	// bind them, so another process (a parallel test package's control
	// plane) may take one in between; then start over on other ports.
	for attempt := 1; ; attempt++ {
		cp, err := start(ctx, opts, bins)
		if err == nil || attempt == startAttempts || !strings.Contains(err.Error(), "address already in use") {
			return cp, err
		}
		fmt.Fprintf(opts.Log, "a port was taken before the control plane bound it; starting over on other ports\n")
	}
}

// startAttempts bounds Start's retries on a port taken under it.
const startAttempts = 3

func start(ctx context.Context, opts Options, bins Binaries) (_ *ControlPlane, err error) {
	began := time.Now()
	dir, err := os.MkdirTemp("", "nodeproxy-controlplane-")
	if err != nil {
		return nil, fmt.Errorf("control plane directory: %w", err)
	}
	cp := &ControlPlane{Dir: dir}
	defer func() {
		if err != nil {
			cp.Stop()
		}
	}()
	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	cp.URL = "https://127.0.0.1:" + strconv.Itoa(ports[0])
	if err := cp.writePKI(); err != nil {
		return nil, err
	}
	authz := opts.Authorization
	if opts.AuthorizationFor != nil {
		if authz, err = opts.AuthorizationFor(cp); err != nil {
			return nil, fmt.Errorf("authorization configuration: %w", err)
		}
	}
	authzPath, err := writeAuthorizationConfig(dir, "authorization-config.yaml", authz)
	if err != nil {
		return nil, err
	}

	cp.etcdURL, err = cp.startEtcd(ctx, bins.Etcd, ports[1], ports[2])
	if err != nil {
		return nil, err
	}
	if err := cp.startAPIServer(ctx, bins.KubeAPIServer, ports[0], authzPath, opts.ExtraAPIServerArgs); err != nil {
		return nil, err
	}
	if err := cp.seed(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(opts.Log, "control plane ready in %s at %s (files in %s)\n", time.Since(began).Round(10*time.Millisecond), cp.URL, cp.Dir)
	return cp, nil
}

func (cp *ControlPlane) writePKI() error {
	var err error
	if cp.ServingCA, err = newCA(cp.Dir, "serving"); err != nil {
		return err
	}
	if cp.ClientCA, err = newCA(cp.Dir, "client"); err != nil {
		return err
	}
	if cp.HubCA, err = cp.ServingCA.IntermediateCA(cp.Dir, "hub"); err != nil {
		return err
	}
	if cp.FrontProxyCA, err = newCA(cp.Dir, "front-proxy"); err != nil {
		return err
	}
	if cp.FrontProxyClient, err = cp.FrontProxyCA.ClientCert(FrontProxyClientName, nil, cp.Dir, "front-proxy-client"); err != nil {
		return err
	}
	if _, err = cp.ServingCA.ServingCert(cp.Dir, "apiserver", "kubernetes", "kubernetes.default", "kubernetes.default.svc"); err != nil {
		return err
	}
	if _, _, err = writeServiceAccountKey(cp.Dir); err != nil {
		return err
	}
	admin, err := cp.ClientCA.ClientCert("nodeproxy-test-admin", []string{"system:masters"}, "", "")
	if err != nil {
		return err
	}
	cp.admin = cp.configFor(admin)
	return nil
}

// FrontProxyClientName is the common name of kube-apiserver's front-proxy
// client certificate; aggregated servers list it in
// --requestheader-allowed-names.
const FrontProxyClientName = "front-proxy-client"

// defaultAuthorization is kubeadm's: Node, then RBAC.
var defaultAuthorization = apiserverv1.AuthorizationConfiguration{
	Authorizers: []apiserverv1.AuthorizerConfiguration{
		{Type: "Node", Name: "node"},
		{Type: "RBAC", Name: "rbac"},
	},
}

func writeAuthorizationConfig(dir, name string, cfg *apiserverv1.AuthorizationConfiguration) (string, error) {
	if cfg == nil {
		cfg = &defaultAuthorization
	}
	c := cfg.DeepCopy()
	c.APIVersion = apiserverv1.SchemeGroupVersion.String()
	c.Kind = "AuthorizationConfiguration"
	b, err := yaml.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("encode authorization configuration: %w", err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return "", fmt.Errorf("write authorization configuration: %w", err)
	}
	return path, nil
}

func (cp *ControlPlane) startEtcd(ctx context.Context, bin string, clientPort, peerPort int) (string, error) {
	client := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	var err error
	cp.etcd, err = StartProcess("etcd", bin, []string{
		"--name=default",
		"--data-dir=" + filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=default=" + peer,
		// Test data is thrown away at the end; fsync would only make every
		// write wait for the shared disk.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}, filepath.Join(cp.Dir, "etcd.log"))
	if err != nil {
		return "", err
	}
	err = WaitReady(ctx, cp.etcd, http.DefaultClient, client+"/health")
	return client, err
}

func (cp *ControlPlane) startAPIServer(ctx context.Context, bin string, port int, authzPath string, extra []string) error {
	args := cp.apiServerArgs(port, authzPath, filepath.Join(cp.Dir, "apiserver-generated"))
	cp.apiserverBin, cp.apiserverArgs = bin, append(args, extra...)
	return cp.runAPIServer(ctx)
}

// apiServerArgs is the command line of a kube-apiserver of this control
// plane on port: its etcd, certificates and service-account keys, the
// authorization configuration at authzPath.
func (cp *ControlPlane) apiServerArgs(port int, authzPath, certDir string) []string {
	f := func(name string) string { return filepath.Join(cp.Dir, name) }
	return []string{
		"--etcd-servers=" + cp.etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + certDir,
		"--tls-cert-file=" + f("apiserver.crt"),
		"--tls-private-key-file=" + f("apiserver.key"),
		"--client-ca-file=" + cp.ClientCA.CertPath,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + f("sa.pub"),
		"--service-account-signing-key-file=" + f("sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-config=" + authzPath,
		"--requestheader-client-ca-file=" + cp.FrontProxyCA.CertPath,
		"--requestheader-allowed-names=" + FrontProxyClientName,
		// The header names every aggregated server expects by default.
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + cp.FrontProxyClient.CertPath,
		"--proxy-client-key-file=" + cp.FrontProxyClient.KeyPath,
		"--allow-privileged=true",
		// The kubelets benchmark reads kube-apiserver's live heap after a
		// collection it forces through /debug/pprof/heap?gc=1; only the
		// admin may reach it.
		"--profiling=true",
	}
}

// runAPIServer starts kube-apiserver as startAPIServer configured it, its
// output appended to its log, and waits until it is ready.
func (cp *ControlPlane) runAPIServer(ctx context.Context) error {
	var err error
	cp.apiserver, err = StartProcess("kube-apiserver", cp.apiserverBin, cp.apiserverArgs, filepath.Join(cp.Dir, "kube-apiserver.log"))
	if err != nil {
		return err
	}
	client, err := rest.HTTPClientFor(cp.admin)
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	return WaitReady(ctx, cp.apiserver, client, cp.URL+"/readyz")
}

// RestartAPIServer stops kube-apiserver unless it has already ended
// (APIServer().Kill() plays a crash), starts it again with the same
// flags, port, certificates and etcd, and returns once its /readyz says
// ok. What was written to etcd before is there after; clients that
// watched see their watches end and, if they resume from a
// resourceVersion the new watch cache does not hold, 410 Expired.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	cp.apiserver.Stop()
	if err := cp.runAPIServer(ctx); err != nil {
		return fmt.Errorf("restart kube-apiserver: %w", err)
	}
	return nil
}

// seed creates what a controller-manager would have made and tests need:
// the default ServiceAccount of the default namespace, without which the
// ServiceAccount admission plugin rejects pods.
func (cp *ControlPlane) seed(ctx context.Context) error {
	return cp.EnsureNamespace(ctx, metav1.NamespaceDefault)
}

// EnsureNamespace creates namespace ns if needed, and its default
// ServiceAccount: there is no controller-manager to make it.
func (cp *ControlPlane) EnsureNamespace(ctx context.Context, ns string) error {
	client, err := kubernetes.NewForConfig(cp.admin)
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	return EnsureNamespace(ctx, client, ns, nil)
}

// EnsureNamespace creates namespace ns with labels unless it exists, and
// its default ServiceAccount: pods name the account, and a cluster
// without kube-controller-manager (this package's) never creates it.
func EnsureNamespace(ctx context.Context, client kubernetes.Interface, ns string, labels map[string]string) error {
	_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %q: %w", ns, err)
	}
	_, err = client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create default service account in %q: %w", ns, err)
	}
	return nil
}

// APIServer is the kube-apiserver process.
func (cp *ControlPlane) APIServer() *Process { return cp.apiserver }

// Stop ends kube-apiserver, then etcd, and removes Dir. It is safe to call
// more than once and on a partly started control plane.
func (cp *ControlPlane) Stop() {
	if cp.apiserver != nil {
		cp.apiserver.Stop()
	}
	if cp.etcd != nil {
		cp.etcd.Stop()
	}
	if cp.Dir != "" {
		_ = os.RemoveAll(cp.Dir)
	}
}

// Logs returns the last lines of both processes' logs, for a test that
// wants to show them on failure.
func (cp *ControlPlane) Logs() string {
	var parts []string
	for _, p := range []*Process{cp.etcd, cp.apiserver} {
		if p != nil {
			parts = append(parts, p.Describe())
		}
	}
	return strings.Join(parts, "\n")
}

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago. Holding all listeners until every port is chosen keeps the
// kernel from handing out the same port twice; another process may still
// take one before its user binds it, a race the callers accept for tests.
func FreePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
