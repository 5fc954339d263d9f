package prometheus_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/prometheus"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// The shipped files this test holds to a real Prometheus, relative to the
// repository.
const (
	ruleManifest       = "manifests/overlays/prometheus/prometheusrule.yaml"
	serviceMonitor     = "manifests/overlays/prometheus/servicemonitor.yaml"
	nodeScrapeConfig   = "manifests/overlays/prometheus/node-scrape-config.yaml"
	metricsRBAC        = "manifests/overlays/prometheus/metrics-rbac.yaml"
	dashboard          = "manifests/overlays/prometheus/grafana-dashboard.json"
	apiServiceManifest = "manifests/base/apiservice.yaml"
)

// The node endpoint's metrics port, as node-scrape-config.yaml names it.
const nodeMetricsPort = 10263

// scrapeInterval is the test Prometheus's (the shipped 30 s would make
// the test wait minutes for the two samples a rate needs).
const scrapeInterval = time.Second

// troubleOnly are the alert selectors whose matchers pick series that
// exist only when something is wrong, so that a healthy system has none
// of them; the test still requires their metric, and every label they
// match on, to exist.
var troubleOnly = map[string]string{
	`nodeproxy_watchmux_channels_closed_total{reason="expired"}`:                                      "channels closed with 410",
	`nodeproxy_watchmux_requests_total{result=~"refused|invalid|too_many_channels|too_many_pending"}`: "channel requests refused",
	`apiserver_authorization_webhook_evaluations_total{name="nodeproxy",result!="success"}`:           "webhook calls that failed",
}

// latencyAlerts alert on a latency threshold that a loaded 2-core test
// machine can pass with no fault in the system (a p99 of a few dozen
// cache writes at startup, one of them preempted): on the running system
// they must evaluate without error and read series that exist, but may
// be pending.
var latencyAlerts = map[string]bool{"NodeproxyCacheWritesSlow": true}

// TestPrometheusScrapesTheHubAndANodeEndpoint runs a real Prometheus
// with the shipped scrape settings (the ServiceMonitor's for the hub,
// node-scrape-config.yaml for the node endpoint's metrics port: HTTPS, a
// ServiceAccount token the overlay's RBAC allows /metrics) against a hub
// process and a node endpoint process in front of a real kube-apiserver,
// with the shipped rules loaded, after a node has read and watched
// through them. Then, on what it scraped:
//   - every rule evaluates without error, and no alert is pending or
//     firing on this healthy system (latencyAlerts excepted);
//   - every dashboard query parses and returns series;
//   - every alert expression parses and returns nothing, and every
//     series it reads exists, with every label it matches on; so a
//     metric renamed in the code and not in the rules or the dashboard
//     fails here;
//   - promtool check metrics finds nothing in a scrape of either.
func TestPrometheusScrapesTheHubAndANodeEndpoint(t *testing.T) {
	bins, err := prometheus.Tools()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	shipped := func(rel string) string { return filepath.Join(root, filepath.FromSlash(rel)) }
	dir := t.TempDir()

	hub, err := cp.StartNodeproxy(ctx, hubBin, hubPort)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hub.Process.Stop)
	if err := cp.RegisterAPIService(ctx, shipped(apiServiceManifest), hubPort); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	token := prometheusToken(t, shipped(metricsRBAC))
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}

	// A node whose pod uses a secret, and its endpoint with the metrics
	// port on a loopback address of its own: the node's InternalIP, so
	// that the shipped relabelling (InternalIP:10263) finds it.
	const node = "node-scraped"
	ns := "scraped"
	workload(t, ns, node)
	nodeIP := fmt.Sprintf("127.%d.%d.%d", 1+rand.IntN(254), 1+rand.IntN(254), 1+rand.IntN(254))
	command := append(controlplane.NodeEndpointCommand(nodeBin), fmt.Sprintf("--metrics-bind-address=%s:%d", nodeIP, nodeMetricsPort))
	endpoint, err := cp.StartNodeEndpoint(ctx, command, node, filepath.Join(dir, "node"), hub.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(endpoint.Process.Stop)

	// kube-apiserver, scraped as kube-prometheus's apiserver job does,
	// for the alerts on its side of nodeproxy (the aggregated API's
	// availability, the webhook's errors).
	scraper, err := cp.ClientCA.ClientCert("prometheus-apiserver-scraper", []string{"system:masters"}, dir, "apiserver-scraper")
	if err != nil {
		t.Fatal(err)
	}
	hubJob, err := prometheus.ServiceMonitorJob(shipped(serviceMonitor), fmt.Sprintf("127.0.0.1:%d", hubPort), "nodeproxy-0", tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	nodeJob, err := prometheus.ScrapeConfigJob(shipped(nodeScrapeConfig), map[string]string{
		"__meta_kubernetes_node_name":               node,
		"__meta_kubernetes_node_address_InternalIP": nodeIP,
	}, tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	nodeJob["scrape_interval"] = scrapeInterval.String()
	apiserverJob := map[string]any{
		"job_name": "apiserver",
		"scheme":   "https",
		"tls_config": map[string]any{
			"ca_file": cp.ServingCA.CertPath, "cert_file": scraper.CertPath, "key_file": scraper.KeyPath,
		},
		"static_configs": []any{map[string]any{"targets": []string{strings.TrimPrefix(cp.URL, "https://")}}},
	}
	rules, alerts, err := prometheus.Rules(shipped(ruleManifest))
	if err != nil {
		t.Fatal(err)
	}
	rulesFile := filepath.Join(dir, "nodeproxy.rules.yaml")
	if err := os.WriteFile(rulesFile, rules, 0o600); err != nil {
		t.Fatal(err)
	}
	prom, err := prometheus.Start(ctx, bins, dir, prometheus.Config{
		ScrapeInterval: scrapeInterval,
		RuleFiles:      []string{rulesFile},
		ScrapeConfigs:  []map[string]any{hubJob, nodeJob, apiserverJob},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prom.Process.Stop)

	testserver.Eventually(t, 60*time.Second, "every target scraped", func(ctx context.Context) error {
		targets, err := prom.Targets(ctx)
		if err != nil {
			return err
		}
		if len(targets) != 3 {
			return fmt.Errorf("%d targets, want 3: %+v", len(targets), targets)
		}
		for _, tg := range targets {
			if tg.Health != "up" {
				return fmt.Errorf("%s (%s): %s %s", tg.ScrapePool, tg.ScrapeURL, tg.Health, tg.LastError)
			}
		}
		return nil
	})
	traffic(t, endpoint, ns)

	t.Run("rules evaluate, no alert on a healthy system", func(t *testing.T) {
		testserver.Eventually(t, 60*time.Second, "every rule evaluated without error, none pending or firing", func(ctx context.Context) error {
			loaded, err := prom.Rules(ctx)
			if err != nil {
				return err
			}
			if len(loaded) != len(alerts) {
				return fmt.Errorf("Prometheus loaded %d rules, the PrometheusRule has %d alerts", len(loaded), len(alerts))
			}
			for _, r := range loaded {
				if r.Health != "ok" {
					return fmt.Errorf("%s: health %q %s", r.Name, r.Health, r.LastError)
				}
				if r.State != "inactive" && !latencyAlerts[r.Name] {
					return fmt.Errorf("%s is %s on a healthy system", r.Name, r.State)
				}
			}
			return nil
		})
	})

	t.Run("dashboard queries return series", func(t *testing.T) {
		queries, err := prometheus.DashboardQueries(shipped(dashboard))
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range queries {
			// A rate needs two samples after the traffic: a few
			// scrapes. The query is not cut by the poll's deadline, so
			// that the last error says what the query returned.
			testserver.Eventually(t, 15*time.Second, fmt.Sprintf("panel %q query %s: %s", q.Panel, q.RefID, q.Expr), func(context.Context) error {
				got, err := prom.Query(ctx, q.Expr)
				if err != nil {
					return err
				}
				if len(got) == 0 {
					return fmt.Errorf("no series")
				}
				return nil
			})
		}
	})

	t.Run("alert expressions read series that exist", func(t *testing.T) {
		read := map[string]bool{}
		for _, a := range alerts {
			got, err := prom.Query(ctx, a.Expr)
			if err != nil {
				t.Errorf("%s: %s: %v", a.Name, a.Expr, err)
				continue
			}
			if len(got) != 0 && !latencyAlerts[a.Name] {
				t.Errorf("%s fires on a healthy system: %v", a.Name, got)
			}
			selectors := prometheus.Selectors(a.Expr)
			if len(selectors) == 0 {
				t.Errorf("%s: no series found in %s", a.Name, a.Expr)
			}
			checked := map[string]bool{} // an expression may read a series twice
			for _, sel := range selectors {
				if !checked[sel] {
					checkSelector(ctx, t, prom, a.Name, sel)
				}
				read[sel], checked[sel] = true, true
			}
		}
		for sel := range troubleOnly {
			if !read[sel] {
				t.Errorf("troubleOnly names %s, which no alert reads", sel)
			}
		}
	})

	t.Run("promtool check metrics", func(t *testing.T) {
		for name, url := range map[string]string{
			"hub":           hub.URL + "/metrics",
			"node endpoint": fmt.Sprintf("https://%s:%d/metrics", nodeIP, nodeMetricsPort),
		} {
			// promtool exits 3 with its findings on stdout, one a line
			// (each printed twice in 2.42); nothing, and 0, when clean.
			out, _ := bins.RunPromtool(ctx, dir, get(t, url, token), "check", "metrics")
			for _, line := range strings.Split(out, "\n") {
				if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "promtool check metrics:") {
					continue
				}
				if metric, _, _ := strings.Cut(line, " "); libraryMetrics[metric] {
					continue
				}
				t.Errorf("promtool check metrics on the %s's /metrics: %s", name, line)
			}
		}
	})
}

// libraryMetrics are series k8s.io/apiserver's delegated authentication
// exports in the hub under the names kube-apiserver exports them with
// (and its dashboards read): promtool flags them, but they are not
// nodeproxy's to rename.
var libraryMetrics = map[string]bool{
	"authenticated_user_requests":                   true, // a counter without _total
	"authentication_attempts":                       true, // a counter without _total
	"authentication_token_cache_active_fetch_count": true, // a gauge named _count
}

// matcherLabel finds the label names of a selector's matchers.
var matcherLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"`)

// checkSelector requires sel's metric to have series, each label it
// matches on to be present on some of them, and sel itself to have
// series unless troubleOnly says why it has none on a healthy system.
func checkSelector(ctx context.Context, t *testing.T, prom *prometheus.Server, alert, sel string) {
	t.Helper()
	name, _, _ := strings.Cut(sel, "{")
	if name == "" {
		t.Errorf("%s: selector %s names no metric", alert, sel)
		return
	}
	has := func(q string) bool {
		got, err := prom.Query(ctx, q)
		if err != nil {
			t.Errorf("%s: %s: %v", alert, q, err)
			return false
		}
		return len(got) > 0
	}
	if !has(name) {
		t.Errorf("%s reads %s: Prometheus scraped no series of it (renamed in the code?)", alert, name)
		return
	}
	for _, m := range matcherLabel.FindAllStringSubmatch(sel, -1) {
		if q := fmt.Sprintf(`%s{%s!=""}`, name, m[1]); !has(q) {
			t.Errorf("%s matches on label %s of %s, which none of its series has", alert, m[1], name)
		}
	}
	if _, ok := troubleOnly[sel]; !ok && !has(sel) {
		t.Errorf("%s reads %s: no series on a running system (if it has none until something goes wrong, say so in troubleOnly)", alert, sel)
	}
}

// prometheusToken applies the overlay's RBAC for Prometheus and returns
// a token of the ServiceAccount it names (kube-prometheus's
// monitoring/prometheus-k8s).
func prometheusToken(t *testing.T, rbac string) string {
	t.Helper()
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	if err := cp.EnsureNamespace(ctx, "monitoring"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ServiceAccounts("monitoring").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus-k8s"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cp.ApplyFiles(ctx, rbac); err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts("monitoring").CreateToken(ctx, "prometheus-k8s", &authenticationv1.TokenRequest{}, metav1.CreateOptions{}) //nolint:exhaustruct
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// workload makes namespace ns with pod p on node, which mounts secret s.
func workload(t *testing.T, ns, node string) {
	t.Helper()
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
			Volumes:    []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// traffic has the node's kubelet (its kubeconfig points at the endpoint)
// do what a kubelet does: read and watch its secret (the endpoint's copy
// of the node's view), list and watch its pods by a label (the hub: a
// bulk get, a channel opened, then closed by the kubelet) and write an event
// (kube-apiserver, which asks the hub's webhook); and sends the hub's
// webhook one malformed review, so that every series the dashboard shows
// exists.
func traffic(t *testing.T, e *controlplane.NodeEndpoint, ns string) {
	t.Helper()
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", e.KubeletKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kubelet := kubernetes.NewForConfigOrDie(cfg)
	testserver.Eventually(t, 30*time.Second, "the kubelet reads its secret", func(ctx context.Context) error {
		_, err := kubelet.CoreV1().Secrets(ns).Get(ctx, "s", metav1.GetOptions{})
		return err
	})
	w, err := kubelet.CoreV1().Secrets(ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "s").String()})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.ResultChan():
	case <-time.After(10 * time.Second):
		t.Fatal("no initial event on the kubelet's watch of its secret")
	}
	w.Stop()
	// The endpoint answers those from its copy of the node's view; a
	// list and a watch of its pods by a label too are the hub's (the
	// copy evaluates no label selector on pods): a bulk get, and a
	// channel opened and closed, so that the hub's series exist. The
	// watch's answer comes once the channel is open.
	byLabel := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", e.Node).String(), LabelSelector: "app"}
	if _, err := kubelet.CoreV1().Pods("").List(ctx, byLabel); err != nil {
		t.Fatal(err)
	}
	byLabel.AllowWatchBookmarks = true
	pods, err := kubelet.CoreV1().Pods("").Watch(ctx, byLabel)
	if err != nil {
		t.Fatal(err)
	}
	pods.Stop()
	// A node's events are in default, as the kubelet writes them.
	if _, err := kubelet.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: "scraped-"},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: e.Node},
		Reason:         "Scraped", Message: "by the Prometheus test", Type: corev1.EventTypeNormal,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the kubelet's event through the endpoint: %v", err)
	}
	webhook, err := cp.UserConfig(testserver.WebhookUser)
	if err != nil {
		t.Fatal(err)
	}
	client, err := rest.HTTPClientFor(webhook)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Post(fmt.Sprintf("https://127.0.0.1:%d/authorize", hubPort), "application/json", strings.NewReader("not a review"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a malformed review: %s, want 400", resp.Status)
	}
}

// get returns the body of a GET of url with a bearer token, without
// verifying the server (as the shipped scrape settings do).
func get(t *testing.T, url, token string) []byte {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // as the shipped scrape settings
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %.300s", url, resp.Status, body)
	}
	return body
}
