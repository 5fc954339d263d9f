package passthrough_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/watchmux"
)

// TestNodeSpansCachedCRDAndAggregatedTypesAsRBACAllows: a node that RBAC
// lets read a CRD and an aggregated API reads them in one request beside
// its own Node (cached, decided by nodeproxy's graph), and watches them
// on one connection; the same request with Deployments, which nothing
// grants it, is refused whole with kube-apiserver's Status. Nodes get no
// more through nodeproxy than kube-apiserver gives them directly.
func TestNodeSpansCachedCRDAndAggregatedTypesAsRBACAllows(t *testing.T) {
	srv := startHub(t)
	const node = "node-rbac"
	grant(t, kubernetes.NewForConfigOrDie(cp.AdminConfig()), "system:node:"+node, []rbacv1.PolicyRule{
		{APIGroups: []string{"e2e.nodeproxy.io"}, Resources: []string{"widgets"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{countsGroup}, Resources: []string{"counts"}, Verbs: []string{"list", "watch"}},
	})
	cfg, err := cp.NodeConfig(node)
	if err != nil {
		t.Fatal(err)
	}
	ownNode := `{"resource":{"version":"v1","resource":"nodes"},"options":{"fieldSelector":"metadata.name=` + node + `"}}`
	for _, e := range endpoints(t, srv, cfg) {
		t.Run(e.name, func(t *testing.T) {
			code, lists, status := e.post(t, ownNode, widgets, countsOp)
			if code != http.StatusCreated {
				t.Fatalf("%d: %+v", code, status)
			}
			want := []string{"NodeList:", "WidgetList: gear", "CountList: visits"}
			for i, l := range lists {
				if l.String() != want[i] {
					t.Errorf("result %d = %q, want %q", i, l, want[i])
				}
			}
			code, _, status = e.post(t, ownNode, widgets, deployments)
			if code != http.StatusForbidden || !strings.Contains(status.Message, `User "system:node:`+node+`" cannot list resource "deployments"`) {
				t.Fatalf("with Deployments: %d %+v, want kube-apiserver's 403", code, status)
			}
		})
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := watchmux.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, sel := range [][3]string{{"e2e.nodeproxy.io", "v1", "widgets"}, {countsGroup, countsVersion, "counts"}} {
		ch, err := c.Watch(ctx, watchOn(sel[0], sel[1], sel[2], ns, streaming()))
		if err != nil {
			t.Fatalf("%s as %s: %v", sel[2], node, err)
		}
		if ev, meta := next(t, ch); ev.Type != watch.Added {
			t.Fatalf("%s: first event %s %s, want the initial ADDED", sel[2], ev.Type, meta.Name)
		}
	}
	if _, err := c.Watch(ctx, watchOn("apps", "v1", "deployments", ns, metav1.ListOptions{})); err == nil ||
		!strings.Contains(err.Error(), "cannot watch resource \"deployments\"") {
		t.Fatalf("Deployments as %s: %v, want kube-apiserver's refusal", node, err)
	}
}
