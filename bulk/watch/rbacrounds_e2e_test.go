package watch_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/hub"
	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// TestDeletedClusterRoleBindingEndsTheChannelWith403: a ServiceAccount
// (kube-proxy's role, system:node-proxier, by a ClusterRoleBinding)
// watches the Services of its namespace directly on the hub, with no
// periodic re-authorization (--watch-reauthorize-interval=0) and the
// connection's maximum age hours away. The binding is deleted while
// Services keep being created: the channel ends with ERROR 403 "access
// lost", as kube-apiserver then refuses the same watch, by a round the
// deletion caused (rounds of reason rbac_change, none periodic), and the
// ERROR is its last event: nothing created after the round reached it
// follows.
func TestDeletedClusterRoleBindingEndsTheChannelWith403(t *testing.T) {
	srv, admin, ns := startKubeProxyHub(t, "rbac-deleted", "--watch-reauthorize-interval=0")
	ctx := context.Background()
	proxy, ch := watchServicesAsKubeProxy(t, srv, admin, ns)

	rounds := map[string]float64{}
	for _, reason := range []string{"rbac_change", "periodic", "rbac_unwatched"} {
		rounds[reason] = testserver.Gathered(t, "nodeproxy_bulk_watch_reauthorization_rounds_total", map[string]string{"reason": reason})
	}
	denied := testserver.Gathered(t, "nodeproxy_bulk_watch_reauthorizations_total", map[string]string{"result": "denied"})
	if err := admin.RbacV1().ClusterRoleBindings().Delete(ctx, ns+":node-proxier", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	// Services keep coming, one every half second, until the channel
	// ends: those created before the round reaches the channel arrive
	// (it was allowed until asked), none after its ERROR.
	stop := make(chan struct{})
	var writes sync.WaitGroup
	writes.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			_, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("after-%d", i)},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
			if err != nil {
				t.Errorf("create a Service: %v", err)
				return
			}
		}
	})
	defer writes.Wait()
	defer close(stop)

	added := 0
	// A bound only so that a broken hub fails rather than hangs: the
	// periodic round is off and the connection's maximum age hours away.
	guard := time.After(5 * time.Minute)
	for ended := false; !ended; {
		select {
		case ev, ok := <-ch.Events:
			if !ok {
				t.Fatalf("the channel closed without an ERROR after %d events", added)
			}
			switch ev.Type {
			case watch.Bookmark:
			case watch.Added:
				added++
			case watch.Error:
				if st := ev.Status; st == nil || st.Code != http.StatusForbidden || !strings.HasPrefix(st.Message, "access lost: ") {
					t.Fatalf("the channel ended with %+v, want 403 access lost", st)
				}
				t.Logf("the channel ended with 403 %q %s after the binding's deletion, having had %d Services created meanwhile",
					ev.Status.Message, time.Since(deleted).Round(time.Second), added)
				ended = true
			default:
				t.Fatalf("unexpected %s", ev.Type)
			}
		case <-guard:
			t.Fatalf("the channel is open 5 minutes after its binding was deleted (%d Services arrived meanwhile)", added)
		}
	}
	// Its last event: whatever is created from now on never arrives.
	select {
	case ev, ok := <-ch.Events:
		if ok {
			t.Errorf("an event after the channel's ERROR: %s", ev.Type)
		}
	case <-time.After(10 * time.Second):
		t.Error("the channel's events did not close after its ERROR")
	}
	if got := testserver.Gathered(t, "nodeproxy_bulk_watch_reauthorizations_total", map[string]string{"result": "denied"}) - denied; got != 1 {
		t.Errorf("%v re-checks denied, want this channel's 1", got)
	}
	if testserver.Gathered(t, "nodeproxy_bulk_watch_reauthorization_rounds_total", map[string]string{"reason": "rbac_change"}) == rounds["rbac_change"] {
		t.Error("no round for an RBAC change ran, yet the channel ended")
	}
	for _, reason := range []string{"periodic", "rbac_unwatched"} {
		if testserver.Gathered(t, "nodeproxy_bulk_watch_reauthorization_rounds_total", map[string]string{"reason": reason}) != rounds[reason] {
			t.Errorf("a %s round ran: the deletion's own round is not what was tested", reason)
		}
	}
	// kube-apiserver agrees.
	direct := rest.CopyConfig(proxy)
	direct.Host = cp.URL
	if _, err := kubernetes.NewForConfigOrDie(direct).CoreV1().Services(ns).Watch(ctx, metav1.ListOptions{}); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("kube-apiserver's own watch after the deletion: %v, want forbidden", err)
	}
}

// TestRoleRulesNarrowedEndTheChannelWith403: a ServiceAccount may read
// Services through a Role of its namespace, bound by a RoleBinding; its
// channel on them is open on the hub (no periodic round). The Role's
// rules are changed to ConfigMaps alone: the hub finds the binding that
// references the Role, and the channel ends with ERROR 403.
func TestRoleRulesNarrowedEndTheChannelWith403(t *testing.T) {
	srv, admin, ns := startKubeProxyHub(t, "rbac-role", "--watch-reauthorize-interval=0")
	ctx := context.Background()
	awaitRBACWatched(t)
	reader := serviceAccountConfig(t, admin, srv, ns, "reader")
	bind(t, admin, ns, "door-reader", "nodeproxy:bulk-nodes", "reader")
	role, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "reads-services"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "reader"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, chs := dialWatching(t, reader, servicesIn(ns))
	defer c.Close()

	updates := testserver.Gathered(t, "nodeproxy_hub_rbac_changes_total", map[string]string{"kind": "Role", "change": "update", "effect": "recheck"})
	role.Rules = []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}}
	if _, err := admin.RbacV1().Roles(ns).Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev, _ := nextEvent(t, chs[0]); ev.Type != watch.Error || ev.Status == nil || ev.Status.Code != http.StatusForbidden {
		t.Fatalf("after the Role's rules narrowed: %s %+v, want ERROR 403", ev.Type, ev.Status)
	}
	if testserver.Gathered(t, "nodeproxy_hub_rbac_changes_total", map[string]string{"kind": "Role", "change": "update", "effect": "recheck"}) == updates {
		t.Error("the Role's update not counted as one that may take access")
	}
}

// TestRBACChangeForAnotherSubjectAsksNothingAboutThisUser: a RoleBinding
// of another ServiceAccount is created and deleted while kube-proxy's
// ServiceAccount watches Services on the hub: both re-check rounds the
// deletion plans run, and none asks about kube-proxy's channel (no
// re-check at all: kube-proxy's is the only channel open). Then the same
// with a RoleBinding of kube-proxy's own that it does not need: its
// channel is asked about, allowed, and stays open.
func TestRBACChangeForAnotherSubjectAsksNothingAboutThisUser(t *testing.T) {
	srv, admin, ns := startKubeProxyHubWith(t, "rbac-other", testserver.Options{
		Args: []string{"--watch-reauthorize-interval=0"},
		// The second round half a minute after the first rather than a
		// minute: distinct from the first (more than 5 s apart), sooner.
		Configure: func(o *hub.Options) { o.Watcher.RBACRecheckAfter = []time.Duration{12 * time.Second, 40 * time.Second} },
	})
	ctx := context.Background()
	_, ch := watchServicesAsKubeProxy(t, srv, admin, ns)

	rechecks := func() float64 {
		var n float64
		for _, result := range []string{"allowed", "denied", "error"} {
			n += testserver.Gathered(t, "nodeproxy_bulk_watch_reauthorizations_total", map[string]string{"result": result})
		}
		return n
	}
	// changeRoleBinding creates a RoleBinding of account to view, then
	// deletes it, and waits for both rounds that the deletion plans. It
	// returns the re-checks made meanwhile.
	changeRoleBinding := func(name, account string) float64 {
		t.Helper()
		b := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: account}}}
		if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		deletions := testserver.Gathered(t, "nodeproxy_hub_rbac_changes_total", map[string]string{"kind": "RoleBinding", "change": "delete", "effect": "recheck"})
		rounds := testserver.Gathered(t, "nodeproxy_bulk_watch_reauthorization_rounds_total", map[string]string{"reason": "rbac_change"})
		before := rechecks()
		if err := admin.RbacV1().RoleBindings(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testserver.Eventually(t, 2*time.Minute, "the hub seeing the deletion and running its two rounds", func(context.Context) error {
			if testserver.Gathered(t, "nodeproxy_hub_rbac_changes_total", map[string]string{"kind": "RoleBinding", "change": "delete", "effect": "recheck"}) == deletions {
				return fmt.Errorf("the deletion of RoleBinding %s not seen", name)
			}
			if n := testserver.Gathered(t, "nodeproxy_bulk_watch_reauthorization_rounds_total", map[string]string{"reason": "rbac_change"}) - rounds; n < 2 {
				return fmt.Errorf("%v rounds ran since, want 2", n)
			}
			return nil
		})
		return rechecks() - before
	}

	if n := changeRoleBinding("other-view", "other"); n != 0 {
		t.Errorf("another ServiceAccount's RoleBinding deleted: %v re-checks, want none (the only open channel is kube-proxy's)", n)
	}
	allowed := testserver.Gathered(t, "nodeproxy_bulk_watch_reauthorizations_total", map[string]string{"result": "allowed"})
	if n := changeRoleBinding("own-view", "kube-proxy"); n < 1 {
		t.Errorf("a RoleBinding of kube-proxy's own deleted: %v re-checks, want its channel asked about", n)
	}
	if testserver.Gathered(t, "nodeproxy_bulk_watch_reauthorizations_total", map[string]string{"result": "allowed"}) == allowed {
		t.Error("kube-proxy's channel not allowed again, though its binding to system:node-proxier stands")
	}
	// Still open: a Service created now arrives.
	if _, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "still-open"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, watch.Added, "still-open")
}

// servicesIn is a channel on the Services of ns, with its initial
// events.
func servicesIn(ns string) v1alpha1.GetOperation {
	return v1alpha1.GetOperation{Resource: metav1.GroupVersionResource{Version: "v1", Resource: "services"}, Namespace: ns,
		Options: metav1.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true}}
}

// watchServicesAsKubeProxy waits for srv to watch RBAC, then opens, as
// ServiceAccount ns/kube-proxy, a channel on the Services of ns and reads
// its initial events. It returns the account's configuration and the
// channel, whose connection closes when the test ends.
func watchServicesAsKubeProxy(t *testing.T, srv *testserver.Server, admin kubernetes.Interface, ns string) (*rest.Config, *watchmux.Channel) {
	t.Helper()
	awaitRBACWatched(t)
	proxy := serviceAccountConfig(t, admin, srv, ns, "kube-proxy")
	c, chs := dialWatching(t, proxy, servicesIn(ns))
	t.Cleanup(func() { _ = c.Close() })
	return proxy, chs[0]
}

// awaitRBACWatched waits for the hub's RBAC informers to have listed:
// from then on RBAC changes, not a per-minute round, cause re-checks.
func awaitRBACWatched(t *testing.T) {
	t.Helper()
	testserver.Eventually(t, time.Minute, "the hub watching RBAC", func(context.Context) error {
		if testserver.Gathered(t, "nodeproxy_bulk_watch_rbac_watched", nil) != 1 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
}
