package endpoint_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/endpoint"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestScrapersNeedATokenAllowedMetrics: the metrics port serves /metrics
// to a bearer token kube-apiserver authenticates, of a user RBAC allows
// to get /metrics, and to nobody else, the node's certificate included.
func TestScrapersNeedATokenAllowedMetrics(t *testing.T) {
	ctx := context.Background()
	n := startNode(t, "node-scraped", "")
	ns := "scrapers"
	prometheus, stranger := scraperToken(t, ns, "prometheus"), scraperToken(t, ns, "stranger")
	allowScraping(t, ns, "prometheus")
	nodeCert, err := tls.LoadX509KeyPair(n.pem, n.pem)
	if err != nil {
		t.Fatal(err)
	}
	scrape := func(bearer string, certs ...tls.Certificate) (int, string) {
		t.Helper()
		return scrapeAs(t, n, bearer, certs...)
	}

	for _, tc := range []struct {
		name   string
		bearer string
		certs  []tls.Certificate
		want   int
	}{
		{"no token", "", nil, http.StatusUnauthorized},
		{"the node's certificate, no token", "", []tls.Certificate{nodeCert}, http.StatusUnauthorized},
		{"a token kube-apiserver does not know", "not-a-token", nil, http.StatusUnauthorized},
		{"a service account RBAC does not allow /metrics", stranger, nil, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := scrape(tc.bearer, tc.certs...)
			if code != tc.want {
				t.Errorf("status %d, want %d: %s", code, tc.want, body)
			}
			if strings.Contains(body, "nodeproxy_node_") {
				t.Errorf("metrics served to a refused caller: %.200s", body)
			}
		})
	}
	// RBAC's authorizer caches nothing, but the grant may reach
	// kube-apiserver's informers a moment after the create returned.
	var code int
	var body string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		code, body = scrape(prometheus)
		return code == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("the allowed service account: status %d: %.300s", code, body)
	}
	// The refusals above are counted in what the scraper reads.
	if !strings.Contains(body, `nodeproxy_node_refused_requests_total{reason="forbidden"}`) {
		t.Errorf("no count of refused scrapers in the answer: %.300s", body)
	}
	if code, _ := scrape("garbage"); code != http.StatusUnauthorized {
		t.Errorf("a garbage token after a good one: %d, want 401", code)
	}
}

// scraperToken creates ServiceAccount ns/sa and returns a token of it.
func scraperToken(t *testing.T, ns, sa string) string {
	t.Helper()
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	if err := controlplane.EnsureNamespace(ctx, admin, ns, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// allowScraping lets ServiceAccount ns/sa get /metrics, as the
// Prometheus overlay's RBAC does.
func allowScraping(t *testing.T, ns, sa string) {
	t.Helper()
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "scrape-node-endpoints"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "scrape-node-endpoints-" + ns + "-" + sa},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "scrape-node-endpoints"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: sa}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// scrapeAs gets n's /metrics on its metrics port with bearer (none if
// empty) and certs, and returns the status and body.
func scrapeAs(t *testing.T, n *node, bearer string, certs ...tls.Certificate) (int, string) {
	t.Helper()
	return get(t, n.metrics+"/metrics", bearer, certs...)
}

// TestScraperTokenFloodIsBounded: random bearer tokens on the metrics
// port, which anyone on the network reaches, cost kube-apiserver a
// bounded number of TokenReviews (counted at a proxy in front of the
// real kube-apiserver), are answered 401 or 429, and do not push an
// allowed scraper's token out: it is served afterwards with no review.
func TestScraperTokenFloodIsBounded(t *testing.T) {
	const name = "node-flooded"
	kp, err := cp.ClientCA.ClientCert("system:node:"+name, []string{"system:nodes"}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	var reviews atomic.Int64
	front := inBetween(t, cp.URL, servingRoots(t), kp, func(_ http.ResponseWriter, req *http.Request) bool {
		if req.Method == http.MethodPost && req.URL.Path == "/apis/authentication.k8s.io/v1/tokenreviews" {
			reviews.Add(1)
		}
		return false
	})
	n := startNodeWith(t, name, nodeSpec{apiServer: front, kubelet: kp})
	ns := "flood"
	good := scraperToken(t, ns, "prometheus")
	allowScraping(t, ns, "prometheus")
	testserver.Eventually(t, 30*time.Second, "the allowed scraper served", func(context.Context) error {
		if code, body := scrapeAs(t, n, good); code != http.StatusOK {
			return fmt.Errorf("status %d: %.200s", code, body)
		}
		return nil
	})

	const flood = 150
	before := reviews.Load()
	start := time.Now()
	codes := map[int]int{}
	for i := range flood {
		code, body := scrapeAs(t, n, fmt.Sprintf("random-token-%d", i))
		codes[code]++
		if code != http.StatusUnauthorized && code != http.StatusTooManyRequests {
			t.Fatalf("random token %d: status %d, want 401 or 429: %.200s", i, code, body)
		}
	}
	// The review budget: the burst, and the rate over the time the flood
	// took; never one review per token.
	allowed := int64(endpoint.ScrapeReviewBurst) + int64(time.Since(start).Seconds()*endpoint.ScrapeReviewRate) + 1
	if got := reviews.Load() - before; got > allowed {
		t.Errorf("%d random tokens cost kube-apiserver %d TokenReviews, want at most %d", flood, got, allowed)
	}
	if codes[http.StatusTooManyRequests] == 0 {
		t.Errorf("no token was throttled: %v", codes)
	}

	before = reviews.Load()
	if code, body := scrapeAs(t, n, good); code != http.StatusOK {
		t.Fatalf("the allowed scraper after the flood: status %d: %.200s", code, body)
	} else if !strings.Contains(body, `nodeproxy_node_refused_requests_total{reason="throttled"}`) {
		t.Errorf("throttled tokens not counted: %.300s", body)
	}
	if got := reviews.Load() - before; got != 0 {
		t.Errorf("the allowed scraper's token was reviewed again after the flood (%d TokenReviews): it was evicted", got)
	}
}
