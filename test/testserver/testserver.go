// Package testserver runs `nodeproxy serve` in-process against a control
// plane from test/controlplane, as the ServiceAccount the manifests
// grant, for tests that need the whole server.
package testserver

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
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/hub"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// ServiceAccount is the identity the manifests bind nodeproxy's RBAC to. A
// client certificate with this user name is, to RBAC, that ServiceAccount.
const ServiceAccount = "system:serviceaccount:nodeproxy:nodeproxy"

// Manifest returns the path of a file of the base, manifests/base/.
func Manifest(t testing.TB, name string) string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "manifests", "base", name)
}

// InstallRBAC applies the manifests that let nodeproxy's ServiceAccount
// authenticate callers and read the cluster, plus any extra manifests.
func InstallRBAC(t testing.TB, cp *controlplane.ControlPlane, extra ...string) {
	t.Helper()
	files := []string{"namespace.yaml", "serviceaccount.yaml", "rbac-delegation.yaml", "rbac-informers.yaml"}
	var paths []string
	for _, f := range append(files, extra...) {
		paths = append(paths, Manifest(t, f))
	}
	if err := cp.ApplyFiles(context.Background(), paths...); err != nil {
		t.Fatal(err)
	}
}

// Server is a nodeproxy running in-process.
type Server struct {
	URL string
	// CA verifies the server's certificate, issued by the control
	// plane's serving CA.
	CA   *x509.CertPool
	stop func() error
}

// Options adjust Start.
type Options struct {
	// Port to serve on; 0 picks a free one.
	Port int
	// Args are extra `nodeproxy serve` flags.
	Args []string
	// Identity is how nodeproxy reaches kube-apiserver; nil means the
	// nodeproxy ServiceAccount (see InstallRBAC).
	Identity *rest.Config
	// ServingCA signs the hub's serving certificate; nil is the control
	// plane's serving CA, kube-apiserver's. A hub of its own CA is what
	// the node endpoint's --hub-ca-file must name.
	ServingCA *controlplane.CA
	// ServingNames are more DNS names the serving certificate covers: a
	// sharded replica's stable name and its Service's, which a test's
	// client reaches through its own dialer.
	ServingNames []string
	// Configure, if set, changes the options after the flags are parsed:
	// for what no flag sets, such as the cache's reflector backoff that a
	// benchmark compares.
	Configure func(*hub.Options)
}

// Start runs nodeproxy until the test ends. It does not wait for
// readiness; see WaitReady.
func Start(t testing.TB, cp *controlplane.ControlPlane, opts Options) *Server {
	t.Helper()
	dir := t.TempDir()
	// Also the name kube-apiserver verifies when the shipped APIService
	// is registered in front of it (RegisterAPIService).
	ca := opts.ServingCA
	if ca == nil {
		ca = cp.ServingCA
	}
	serving, err := ca.ServingCert(dir, "serving", append([]string{controlplane.LocalServiceName("nodeproxy", "nodeproxy")}, opts.ServingNames...)...)
	if err != nil {
		t.Fatal(err)
	}
	identity := opts.Identity
	if identity == nil {
		if identity, err = cp.UserConfig(ServiceAccount, "system:serviceaccounts", "system:serviceaccounts:nodeproxy"); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := controlplane.WriteKubeconfig(identity, kubeconfig); err != nil {
		t.Fatal(err)
	}
	port := opts.Port
	if port == 0 {
		ports, err := controlplane.FreePorts(1)
		if err != nil {
			t.Fatal(err)
		}
		port = ports[0]
	}
	o := hub.NewOptions()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	for _, set := range o.Flags().FlagSets {
		fs.AddFlagSet(set)
	}
	args := append([]string{
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + serving.CertPath,
		"--tls-private-key-file=" + serving.KeyPath,
		"--kubeconfig=" + kubeconfig,
	}, opts.Args...)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if opts.Configure != nil {
		opts.Configure(o)
	}
	if err := o.Complete(); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cfg, err := o.Config(ctx)
	if err != nil {
		cancel()
		t.Fatalf("config: %v", err)
	}
	srv, err := cfg.New()
	if err != nil {
		cancel()
		t.Fatalf("new: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	s := &Server{
		URL: "https://127.0.0.1:" + strconv.Itoa(port),
		CA:  pool,
		stop: func() error {
			cancel()
			select {
			case err := <-done:
				return err
			case <-time.After(30 * time.Second):
				return errors.New("server did not stop within 30s of its context ending")
			}
		},
	}
	var once sync.Once
	stop := s.stop
	s.stop = func() (err error) {
		once.Do(func() { err = stop() })
		return err
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("stop server: %v", err)
		}
	})
	return s
}

// Stop stops the server before the test ends, as a crash or a rolling
// update would; the test's cleanup then does nothing more.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if err := s.stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("stop server: %v", err)
	}
}

// Client returns an HTTPS client that trusts the server and presents cfg's
// client certificate (none when cfg is nil).
func (s *Server) Client(t testing.TB, cfg *rest.Config) *http.Client {
	t.Helper()
	tc := &tls.Config{RootCAs: s.CA}
	if cfg != nil {
		pair, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
		if err != nil {
			t.Fatal(err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	// HTTP/2, as client-go (and so kube-apiserver's webhook client) speaks it.
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
}

// WaitReady waits until /readyz answers 200.
func (s *Server) WaitReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	c := s.Client(t, nil)
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		resp, err := c.Get(s.URL + "/readyz?verbose")
		if err != nil {
			last = err.Error()
			return false, nil
		}
		resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("nodeproxy not ready within %s (last: %s)", timeout, last)
	}
}

// WebhookUser is the identity kube-apiserver presents to nodeproxy's
// webhook, the subject of manifests/rbac-webhook.yaml.
const WebhookUser = "kube-apiserver-nodeproxy-webhook"

// RunBehindWebhook is a TestMain for packages whose tests put nodeproxy in
// front of kube-apiserver as the manifests do: kube-apiserver runs with
// controlplane.AuthorizationConfigManifest (nodeproxy's webhook
// for node identities, then RBAC), calling nodeproxy on *port, which the
// tests then serve on. kube-apiserver's decision cache is off, so that
// revocation shows nodeproxy's graph, not the cache's TTL.
func RunBehindWebhook(m *testing.M, cp **controlplane.ControlPlane, port *int) int {
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*port = ports[0]
	root, err := controlplane.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return RunTests(m, controlplane.Options{
		AuthorizationFor: controlplane.WebhookAuthorization(
			filepath.Join(root, filepath.FromSlash(controlplane.AuthorizationConfigManifest)),
			fmt.Sprintf("https://127.0.0.1:%d/authorize", *port), WebhookUser, false),
	}, cp)
}

// Eventually polls check every 100 ms until it returns nil, and fails the
// test with what and the errors check gave if the timeout passes first.
// Caches, informers and aggregation all converge a moment after a write.
//
// The last error alone often says only that the final poll was cut at the
// deadline, so the message lists each distinct error in the order first
// seen (at most eventuallyErrors, with how often each came).
func Eventually(t testing.TB, timeout time.Duration, what string, check func(context.Context) error) {
	t.Helper()
	var seen errorTally
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		err := check(ctx)
		seen.add(err)
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: not within %s: %s", what, timeout, seen.String())
	}
}
