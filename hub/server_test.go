package hub_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/hub"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(testserver.RunTests(m, controlplane.Options{}, &cp))
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
func waitStatus(t *testing.T, r *testserver.Server, c *http.Client, path string, want int, timeout time.Duration) string {
	t.Helper()
	var code int
	var body string
	var err error
	pollErr := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		code, body, err = get(c, r.URL+path)
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
	// informers may not list anything yet. (A binding left by an earlier
	// run or test goes first.)
	err := kubernetes.NewForConfigOrDie(cp.AdminConfig()).RbacV1().ClusterRoleBindings().Delete(ctx, "nodeproxy:informers", metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := cp.ApplyFiles(ctx, testserver.Manifest(t, "namespace.yaml"), testserver.Manifest(t, "serviceaccount.yaml"), testserver.Manifest(t, "rbac-delegation.yaml")); err != nil {
		t.Fatal(err)
	}
	srv := testserver.Start(t, cp, testserver.Options{})
	anon := srv.Client(t, nil)

	waitStatus(t, srv, anon, "/livez", http.StatusOK, 60*time.Second)
	// Live but not ready, for as long as the informers cannot list. Look
	// several times: one look could catch the instant before the check ran.
	for range 5 {
		code, body, err := get(anon, srv.URL+"/readyz?verbose")
		if err != nil {
			t.Fatal(err)
		}
		if code == http.StatusOK {
			t.Fatalf("/readyz is ok although the informers cannot list:\n%s", body)
		}
		if !strings.Contains(body, "[-]cache-sync failed") {
			t.Fatalf("/readyz does not name the informer check:\n%s", body)
		}
		time.Sleep(200 * time.Millisecond)
	}

	if err := cp.ApplyFiles(ctx, testserver.Manifest(t, "rbac-informers.yaml")); err != nil {
		t.Fatal(err)
	}
	// The reflectors retry with backoff (cache.ReflectorBackoff: at most 3 s between lists).
	body := waitStatus(t, srv, anon, "/readyz?verbose", http.StatusOK, 90*time.Second)
	if !strings.Contains(body, "[+]cache-sync ok") {
		t.Errorf("/readyz ok without the informer check:\n%s", body)
	}
}

func TestOnlyHealthIsOpenToUnauthenticatedCallers(t *testing.T) {
	testserver.InstallRBAC(t, cp)
	srv := testserver.Start(t, cp, testserver.Options{})
	anon := srv.Client(t, nil)
	waitStatus(t, srv, anon, "/readyz", http.StatusOK, 90*time.Second)

	stranger, err := cp.UserConfig("mallory")
	if err != nil {
		t.Fatal(err)
	}
	admin := srv.Client(t, cp.AdminConfig())
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
		{"user without RBAC, metrics", srv.Client(t, stranger), "/metrics", http.StatusForbidden},
		{"anonymous authorization webhook", anon, "/authorize", http.StatusForbidden},
		{"user without RBAC, authorization webhook", srv.Client(t, stranger), "/authorize", http.StatusForbidden},
		{"system:masters, authorization webhook, wrong method", admin, "/authorize", http.StatusMethodNotAllowed},
		{"system:masters, metrics", admin, "/metrics", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, err := get(tc.client, srv.URL+tc.path)
			if err != nil {
				t.Fatal(err)
			}
			if code != tc.want {
				t.Errorf("GET %s = %d, want %d: %s", tc.path, code, tc.want, body)
			}
		})
	}

	_, metrics, err := get(admin, srv.URL+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`nodeproxy_cache_objects{resource="serviceaccounts"}`, `nodeproxy_cache_relists_total{resource="pods"}`,
		`nodeproxy_cache_staleness_seconds{resource="secrets"}`, `nodeproxy_cache_watch_outage_seconds{resource="secrets"} 0`,
		`nodeproxy_cache_watch_failures_total{reason="expired",request="watch",resource="secrets"}`,
	} {
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
	o := hub.NewOptions()
	o.Kubeconfig = kubeconfig
	if err := o.Complete(); err != nil {
		t.Fatal(err)
	}
	_, err = o.Config(context.Background())
	if err == nil || !strings.Contains(err.Error(), cfg.Host) {
		t.Fatalf("Config() error = %v, want one naming %s", err, cfg.Host)
	}
}
