package endpoint_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// TestScrapersNeedATokenAllowedMetrics: the metrics port serves /metrics
// to a bearer token kube-apiserver authenticates, of a user RBAC allows
// to get /metrics, and to nobody else, the node's certificate included.
func TestScrapersNeedATokenAllowedMetrics(t *testing.T) {
	ctx := context.Background()
	n := startNode(t, "node-scraped", "")
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	ns := "scrapers"
	if err := controlplane.EnsureNamespace(ctx, admin, ns, nil); err != nil {
		t.Fatal(err)
	}
	token := func(sa string) string {
		t.Helper()
		if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	prometheus, stranger := token("prometheus"), token("stranger")
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "scrape-node-endpoints"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "scrape-node-endpoints"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "scrape-node-endpoints"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "prometheus"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	servingCA, err := os.ReadFile(cp.ServingCA.CertPath)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(servingCA)
	nodeCert, err := tls.LoadX509KeyPair(n.pem, n.pem)
	if err != nil {
		t.Fatal(err)
	}
	scrape := func(bearer string, certs ...tls.Certificate) (int, string) {
		t.Helper()
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs}}}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.metrics+"/metrics", nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
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
