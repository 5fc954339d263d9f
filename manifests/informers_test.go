package manifests

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestInformersRoleCoversEveryCachedType applies the shipped
// rbac-informers.yaml and asks kube-apiserver whether the hub's
// ServiceAccount may list and watch every type the cache watches: a type
// added to the cache without its rule would leave the hub unready for
// ever (its first list refused), on a cluster rather than in a test.
// And RBAC's four types, which the hub watches to know when to authorize
// open channels again (hub/rbacchanges.go): without them it would fall
// back to asking about every channel every minute.
func TestInformersRoleCoversEveryCachedType(t *testing.T) {
	ctx := context.Background()
	if err := cp.EnsureNamespace(ctx, "nodeproxy"); err != nil {
		t.Fatal(err)
	}
	if err := cp.ApplyFiles(ctx, filepath.Join("base", "rbac-informers.yaml")); err != nil {
		t.Fatal(err)
	}
	cfg := cp.AdminConfig()
	cfg.QPS = -1 // a round is one review per type and verb, repeated until RBAC has the role
	admin := kubernetes.NewForConfigOrDie(cfg)
	// RBAC's informers hear of the new role a moment after it is stored.
	// Each round runs to its end (not on the poll's context), so that a
	// failure names what is refused rather than the deadline.
	testserver.Eventually(t, 30*time.Second, "the hub may list and watch every cached type", func(context.Context) error {
		return informersMay(ctx, admin)
	})
}

func informersMay(ctx context.Context, admin kubernetes.Interface) error {
	var refused []string
	rbac := rbacv1.SchemeGroupVersion
	watched := append(cache.Watched(), rbac.WithResource("clusterroles"), rbac.WithResource("clusterrolebindings"),
		rbac.WithResource("roles"), rbac.WithResource("rolebindings"))
	for _, gvr := range watched {
		for _, verb := range []string{"list", "watch"} {
			review, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{
					User:   "system:serviceaccount:nodeproxy:nodeproxy",
					Groups: []string{"system:serviceaccounts", "system:serviceaccounts:nodeproxy", "system:authenticated"},
					ResourceAttributes: &authorizationv1.ResourceAttributes{
						Verb: verb, Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource,
					},
				},
			}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if !review.Status.Allowed {
				refused = append(refused, verb+" "+gvr.String())
			}
		}
	}
	if len(refused) > 0 {
		return fmt.Errorf("the hub may not %s", strings.Join(refused, ", "))
	}
	return nil
}
