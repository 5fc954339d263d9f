package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/internal/controlplane"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTests(m, controlplane.Options{}, &cp))
}

// serviceAccount is the identity the manifests bind their RBAC to. A client
// certificate with this user name is treated by RBAC exactly as the
// ServiceAccount's token would be.
const serviceAccount = "system:serviceaccount:nodeproxy:nodeproxy"

func manifest(name string) string { return filepath.Join("..", "..", "manifests", name) }

// running is a nodeproxy server started in-process for a test.
type running struct {
	url  string
	ca   *x509.CertPool
	stop func() error
}

// startServer runs `nodeproxy serve` in-process with the given flags plus a
// serving certificate from the control plane's serving CA and a kubeconfig
// for the nodeproxy ServiceAccount. Stop cancels the server's context and
// returns what Run returned.
func startServer(t *testing.T, args ...string) *running {
	t.Helper()
	dir := t.TempDir()
	serving, err := cp.ServingCA.ServingCert(dir, "serving")
	if err != nil {
		t.Fatal(err)
	}
	kcfg, err := cp.UserConfig(serviceAccount, "system:serviceaccounts", "system:serviceaccounts:nodeproxy")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := controlplane.WriteKubeconfig(kcfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	fs := o.Flags()
	all := append([]string{
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--tls-cert-file=" + serving.CertPath,
		"--tls-private-key-file=" + serving.KeyPath,
		"--kubeconfig=" + kubeconfig,
	}, args...)
	for _, a := range all {
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !setFlag(fs, name, value) {
			t.Fatalf("unknown flag %s", a)
		}
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
	pool.AddCert(cp.ServingCA.Cert)
	r := &running{
		url: "https://127.0.0.1:" + strconv.Itoa(ports[0]),
		ca:  pool,
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
	t.Cleanup(func() {
		if err := r.stop(); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("stop server: %v", err)
		}
	})
	return r
}

// client returns an HTTPS client that trusts the server and presents cfg's
// client certificate (none when cfg is nil).
func (r *running) client(t *testing.T, cfg *rest.Config) *http.Client {
	t.Helper()
	tc := &tls.Config{RootCAs: r.ca}
	if cfg != nil {
		pair, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
		if err != nil {
			t.Fatal(err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
}

func get(c *http.Client, url string) (int, string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitStatus polls path until it answers want, and returns the last body.
func (r *running) waitStatus(t *testing.T, c *http.Client, path string, want int, timeout time.Duration) string {
	t.Helper()
	var code int
	var body string
	var err error
	pollErr := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		code, body, err = get(c, r.url+path)
		return err == nil && code == want, nil
	})
	if pollErr != nil {
		t.Fatalf("GET %s: want %d, last got %d %q (err %v)", path, want, code, body, err)
	}
	return body
}

func TestReadyOnlyAfterInformersSync(t *testing.T) {
	ctx := context.Background()
	// Delegation RBAC only: the server authenticates callers, but its
	// informers may not list anything yet.
	if err := cp.ApplyFiles(ctx, manifest("namespace.yaml"), manifest("serviceaccount.yaml"), manifest("rbac-delegation.yaml")); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t)
	anon := srv.client(t, nil)

	srv.waitStatus(t, anon, "/livez", http.StatusOK, 60*time.Second)
	// Live but not ready, for as long as the informers cannot list. Look
	// several times: one look could catch the instant before the check ran.
	for range 5 {
		code, body, err := get(anon, srv.url+"/readyz?verbose")
		if err != nil {
			t.Fatal(err)
		}
		if code == http.StatusOK {
			t.Fatalf("/readyz is ok although the informers cannot list:\n%s", body)
		}
		if !strings.Contains(body, "[-]informer-sync failed") {
			t.Fatalf("/readyz does not name the informer check:\n%s", body)
		}
		time.Sleep(200 * time.Millisecond)
	}

	if err := cp.ApplyFiles(ctx, manifest("rbac-informers.yaml")); err != nil {
		t.Fatal(err)
	}
	// The reflectors retry with backoff (up to 30 s between lists).
	body := srv.waitStatus(t, anon, "/readyz?verbose", http.StatusOK, 90*time.Second)
	if !strings.Contains(body, "[+]informer-sync ok") {
		t.Errorf("/readyz ok without the informer check:\n%s", body)
	}
}

func TestOnlyHealthIsOpenToUnauthenticatedCallers(t *testing.T) {
	ctx := context.Background()
	if err := cp.ApplyFiles(ctx, manifest("namespace.yaml"), manifest("serviceaccount.yaml"), manifest("rbac-delegation.yaml"), manifest("rbac-informers.yaml")); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t)
	anon := srv.client(t, nil)
	srv.waitStatus(t, anon, "/readyz", http.StatusOK, 90*time.Second)

	stranger, err := cp.UserConfig("mallory")
	if err != nil {
		t.Fatal(err)
	}
	admin := srv.client(t, cp.AdminConfig())
	for _, tc := range []struct {
		name   string
		client *http.Client
		path   string
		want   int
	}{
		{"anonymous livez", anon, "/livez", http.StatusOK},
		{"anonymous readyz", anon, "/readyz", http.StatusOK},
		{"anonymous healthz", anon, "/healthz", http.StatusOK},
		{"anonymous metrics", anon, "/metrics", http.StatusForbidden},
		{"anonymous version", anon, "/version", http.StatusForbidden},
		{"anonymous root", anon, "/", http.StatusForbidden},
		{"anonymous apis", anon, "/apis", http.StatusForbidden},
		{"user without RBAC, metrics", srv.client(t, stranger), "/metrics", http.StatusForbidden},
		{"system:masters, metrics", admin, "/metrics", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, err := get(tc.client, srv.url+tc.path)
			if err != nil {
				t.Fatal(err)
			}
			if code != tc.want {
				t.Errorf("GET %s = %d, want %d: %s", tc.path, code, tc.want, body)
			}
		})
	}

	_, metrics, err := get(admin, srv.url+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`nodeproxy_informer_events_total{resource="serviceaccounts",type="add"}`, `nodeproxy_informer_objects{resource="pods"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestConfigFailsFastWhenKubeAPIServerIsAbsent(t *testing.T) {
	dir := t.TempDir()
	ports, err := controlplane.FreePorts(1) // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	cfg := cp.AdminConfig()
	cfg.Host = fmt.Sprintf("https://127.0.0.1:%d", ports[0])
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := controlplane.WriteKubeconfig(cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	o.Kubeconfig = kubeconfig
	if err := o.Complete(); err != nil {
		t.Fatal(err)
	}
	_, err = o.Config(context.Background())
	if err == nil || !strings.Contains(err.Error(), cfg.Host) {
		t.Fatalf("Config() error = %v, want one naming %s", err, cfg.Host)
	}
}
