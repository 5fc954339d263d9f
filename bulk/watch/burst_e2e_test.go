package watch_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/bulke2e"
	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// TestChannelLimitHoldsUnderABurstOfRealAuthorizations is issue 14's
// first defect end to end: a user who is not a node, whose every channel
// open waits on a SubjectAccessReview that nodeproxy sends the real
// kube-apiserver (a different secret each, so no cached answer), holds
// some channels of a connection limited to --watch-max-channels and sends
// a burst of opens larger than what is left, within --watch-max-pending.
// Exactly the channels left open; the rest are refused with 429. Before
// slots were reserved at acceptance, every open of such a burst passed
// the check while the others were still authorizing: 4,128 channels on a
// connection limited to 4,096.
func TestChannelLimitHoldsUnderABurstOfRealAuthorizations(t *testing.T) {
	const maxChannels, before, burst = 8, 4, 16
	ctx := context.Background()
	ns := bulke2e.Workload(t, cp)
	testserver.InstallRBAC(t, cp, "rbac-webhook.yaml", "rbac-bulk.yaml")
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	const user = "burst-user"
	grant := func(create func() error) {
		t.Helper()
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	grant(func() error {
		_, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "burst-bulk-watch"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"bulk.k8s.io"}, Resources: []string{"bulkgetoperations"}, Verbs: []string{"create", "watch"}}},
		}, metav1.CreateOptions{})
		return err
	})
	grant(func() error {
		_, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "burst-bulk-watch"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "burst-bulk-watch"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		}, metav1.CreateOptions{})
		return err
	})
	grant(func() error {
		_, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "burst-secrets"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list", "watch"}}},
		}, metav1.CreateOptions{})
		return err
	})
	grant(func() error {
		_, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "burst-secrets"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "burst-secrets"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		}, metav1.CreateOptions{})
		return err
	})

	srv := testserver.Start(t, cp, testserver.Options{Args: []string{
		fmt.Sprintf("--watch-max-channels=%d", maxChannels), fmt.Sprintf("--watch-max-pending=%d", burst)}})
	srv.WaitReady(t, 90*time.Second)
	cfg, err := cp.UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host = srv.URL
	open := func(c *watchmux.Client, i int) (*watchmux.Channel, error) {
		return c.Watch(ctx, selector("secrets", ns, fmt.Sprintf("metadata.name=burst-%d", i), metav1.ListOptions{}))
	}
	// RBAC's bindings reach kube-apiserver's authorizer a moment after
	// they are written: wait until the user may open a channel at all.
	var c *watchmux.Client
	testserver.Eventually(t, 30*time.Second, "the user's first channel", func(context.Context) error {
		if c != nil {
			_ = c.Close()
		}
		if c, err = watchmux.Dial(ctx, cfg); err != nil {
			return err
		}
		_, err := open(c, 0)
		return err
	})
	defer c.Close()
	for i := 1; i < before; i++ {
		if _, err := open(c, i); err != nil {
			t.Fatal(err)
		}
	}

	var (
		wg              sync.WaitGroup
		mu              sync.Mutex
		opened, refused int
	)
	for i := range burst {
		wg.Go(func() {
			_, err := open(c, before+i)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				opened++
			case apierrors.IsTooManyRequests(err):
				refused++
			default:
				t.Errorf("open %d of the burst: %v", i, err)
			}
		})
	}
	wg.Wait()
	if opened != maxChannels-before || refused != burst-(maxChannels-before) {
		t.Errorf("burst of %d with %d of %d channels open: %d opened, %d refused with 429; want exactly %d and %d",
			burst, before, maxChannels, opened, refused, maxChannels-before, burst-(maxChannels-before))
	}
}
