package watch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/bulke2e"
	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// TestNodeWatchUpgradeDoesNotWaitForKubeAPIServerRBAC forces the moment
// after a kube-apiserver restart when its RBAC informers have not synced
// and it denies what RBAC allows (issue 14, item 5): the real
// kube-apiserver, with manifests/rbac-bulk.yaml's binding removed, denies
// node-a's "watch bulkgetoperations" exactly as an empty RBAC cache does.
// node-a's websocket upgrade straight to nodeproxy must still succeed, and
// once the binding is back (RBAC warm), so must the very next one: before
// the fix the first got 403 and the second got the cached 403 for
// --authorization-webhook-cache-unauthorized-ttl. What node-a reads is
// still the graph's to decide: node-b's secret stays refused.
func TestNodeWatchUpgradeDoesNotWaitForKubeAPIServerRBAC(t *testing.T) {
	srv := bulke2e.StartNodeproxy(t, cp, npPort)
	ns := bulke2e.Workload(t, cp)
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	nodeA, err := cp.NodeConfig("node-a")
	if err != nil {
		t.Fatal(err)
	}
	directCfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{
		CertData: nodeA.CertData, KeyData: nodeA.KeyData, CAFile: cp.ServingCA.CertPath,
	}}
	// Until nodeproxy has pod a, node-a reaches nothing: wait for it.
	testserver.Eventually(t, 30*time.Second, "node-a's pod in the cache", func(context.Context) error {
		code, _, status := bulke2e.Direct(t, srv, nodeA).Post(t, bulke2e.Request(bulke2e.Op("secrets", ns, "metadata.name=secret-a")))
		if code >= 300 {
			return apierrors.FromObject(status)
		}
		return nil
	})

	// kube-apiserver's RBAC "not synced yet": the binding is gone.
	if err := admin.RbacV1().ClusterRoleBindings().Delete(ctx, "nodeproxy:bulk-nodes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	restored := false
	t.Cleanup(func() {
		if !restored {
			testserver.InstallRBAC(t, cp, "rbac-bulk.yaml")
		}
	})
	testserver.Eventually(t, 30*time.Second, "kube-apiserver denying node-a the bulk watch", func(ctx context.Context) error {
		allowed, err := nodeMayWatchBulk(ctx, admin, "node-a")
		if err != nil {
			return err
		}
		if allowed {
			return fmt.Errorf("kube-apiserver still allows node-a to watch bulkgetoperations")
		}
		return nil
	})

	watchOwnSecret := func(step string) {
		t.Helper()
		c, err := watchmux.Dial(ctx, directCfg)
		if err != nil {
			t.Fatalf("%s: websocket upgrade: %v", step, err)
		}
		defer c.Close()
		ch, err := c.Watch(ctx, selector("secrets", ns, "metadata.name=secret-a", metav1.ListOptions{}))
		if err != nil {
			t.Fatalf("%s: node-a's own secret: %v", step, err)
		}
		_ = ch
		if _, err := c.Watch(ctx, selector("secrets", ns, "metadata.name=secret-b", metav1.ListOptions{})); !apierrors.IsForbidden(err) {
			t.Fatalf("%s: node-b's secret: got %v, want 403 from the graph", step, err)
		}
	}
	watchOwnSecret("while kube-apiserver's RBAC denies")

	// RBAC warm again: the next upgrade must not meet a remembered denial.
	testserver.InstallRBAC(t, cp, "rbac-bulk.yaml")
	restored = true
	testserver.Eventually(t, 30*time.Second, "kube-apiserver allowing node-a the bulk watch", func(ctx context.Context) error {
		allowed, err := nodeMayWatchBulk(ctx, admin, "node-a")
		if err != nil {
			return err
		}
		if !allowed {
			return fmt.Errorf("kube-apiserver still denies node-a")
		}
		return nil
	})
	watchOwnSecret("right after kube-apiserver's RBAC allows again")
}

// nodeMayWatchBulk asks kube-apiserver, uncached, what nodeproxy's
// delegated authorizer would ask for node's websocket upgrade.
func nodeMayWatchBulk(ctx context.Context, admin kubernetes.Interface, node string) (bool, error) {
	sar, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   "system:node:" + node,
			Groups: []string{"system:nodes", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: "watch", Group: v1alpha1.GroupName, Version: "v1alpha1", Resource: "bulkgetoperations",
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("SubjectAccessReview for %s: %w", node, err)
	}
	return sar.Status.Allowed, nil
}
