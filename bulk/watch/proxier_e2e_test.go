package watch_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/bulke2e"
	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// TestKubeProxyServiceAccountAsRBACDecides: a ServiceAccount token bound
// to the bootstrap ClusterRole system:node-proxier (kube-proxy's) opens
// channels on services and endpointslices with kube-proxy's own selectors
// and on servicecidrs, and gets their events; a token of an account
// without that binding is refused each channel with 403, and an invalid
// token the connection with 401. Once the binding is deleted, the open
// channels end with ERROR 403 within the delegated authorizer's cache TTL
// (10 s, k8s.io/apiserver's default) plus the re-check interval (1 s here).
func TestKubeProxyServiceAccountAsRBACDecides(t *testing.T) {
	srv, admin, ns := startKubeProxyHub(t, "kube-proxy", "--watch-reauthorize-interval=1s")
	ctx := context.Background()
	proxy := serviceAccountConfig(t, admin, srv, ns, "kube-proxy")
	// The stranger may knock at the bulk API's door too (as nodes may);
	// only the proxy may read what kube-proxy reads.
	stranger := serviceAccountConfig(t, admin, srv, ns, "stranger")
	bind(t, admin, ns, "door-stranger", "nodeproxy:bulk-nodes", "stranger")

	services := v1alpha1.GetOperation{Resource: metav1.GroupVersionResource{Version: "v1", Resource: "services"},
		Options: metav1.ListOptions{LabelSelector: "!service.kubernetes.io/service-proxy-name", FieldSelector: "spec.clusterIP!=None", SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true}}
	slices := v1alpha1.GetOperation{Resource: metav1.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"},
		Options: metav1.ListOptions{LabelSelector: "!service.kubernetes.io/headless", SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true}}
	cidrs := v1alpha1.GetOperation{Resource: metav1.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "servicecidrs"},
		Options: metav1.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true}}

	c, chs := dialWatching(t, proxy, services, slices, cidrs)
	defer c.Close()
	servicesCh, slicesCh, cidrsCh := chs[0], chs[1], chs[2]

	outer := t
	t.Run("events arrive, selected as kube-proxy selects them", func(t *testing.T) {
		port := []corev1.ServicePort{{Port: 80}}
		for _, s := range []*corev1.Service{
			{ObjectMeta: metav1.ObjectMeta{Name: "headless"}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: port}},
			{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Labels: map[string]string{"service.kubernetes.io/service-proxy-name": "other"}}, Spec: corev1.ServiceSpec{Ports: port}},
			{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{Ports: port}},
		} {
			if _, err := admin.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range []*discoveryv1.EndpointSlice{
			{ObjectMeta: metav1.ObjectMeta{Name: "headless-1", Labels: map[string]string{corev1.IsHeadlessService: ""}}, AddressType: discoveryv1.AddressTypeIPv4},
			{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}}, AddressType: discoveryv1.AddressTypeIPv4},
		} {
			if _, err := admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		cidr := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: ns}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.201.0.0/24"}}}
		if _, err := admin.NetworkingV1().ServiceCIDRs().Create(ctx, cidr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Deleted once the channels have ended, not before: its DELETED
		// would come before their ERROR.
		outer.Cleanup(func() {
			_ = admin.NetworkingV1().ServiceCIDRs().Delete(context.Background(), ns, metav1.DeleteOptions{})
		})
		// The first event of each is the one object selected: the
		// others, made before it, were not.
		expect(t, servicesCh, watch.Added, "web")
		expect(t, slicesCh, watch.Added, "web-1")
		expect(t, cidrsCh, watch.Added, ns)
	})

	t.Run("an account without the binding is refused each channel", func(t *testing.T) {
		sc, err := watchmux.Dial(ctx, stranger)
		if err != nil {
			t.Fatal(err)
		}
		defer sc.Close()
		for _, sel := range []v1alpha1.GetOperation{services, slices, cidrs} {
			if _, err := sc.Watch(ctx, sel); !apierrors.IsForbidden(err) {
				t.Errorf("%s: %v; want 403", sel.Resource.Resource, err)
			}
		}
	})

	t.Run("an invalid token is refused the connection", func(t *testing.T) {
		bad := rest.CopyConfig(proxy)
		bad.BearerToken = "not-a-token"
		if _, err := watchmux.Dial(ctx, bad); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
			t.Errorf("dial with an invalid token: %v; want 401", err)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+bulke2e.Path, strings.NewReader(bulke2e.Request(bulke2e.Op("services", "", ""))))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer not-a-token")
		req.Header.Set("Content-Type", "application/json")
		resp, err := srv.Client(t, nil).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("bulk get with an invalid token: %d, want 401", resp.StatusCode)
		}
	})

	t.Run("a node: services by the system:node role, endpointslices by RBAC", func(t *testing.T) {
		nodeA, err := cp.NodeConfig("node-a")
		if err != nil {
			t.Fatal(err)
		}
		direct := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CertData: nodeA.CertData, KeyData: nodeA.KeyData, CAFile: cp.ServingCA.CertPath}}
		nc, err := watchmux.Dial(ctx, direct)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if _, err := nc.Watch(ctx, services); err != nil {
			t.Errorf("services: %v", err)
		}
		// No binding gives nodes endpointslices: RBAC has no opinion.
		if _, err := nc.Watch(ctx, slices); !apierrors.IsForbidden(err) {
			t.Errorf("endpointslices without a binding: %v; want 403", err)
		}
		bind(t, admin, ns, "nodes-read-slices", "system:node-proxier")
		testserver.Eventually(t, 30*time.Second, "endpointslices once RBAC allows nodes", func(ctx context.Context) error {
			_, err := nc.Watch(ctx, slices)
			return err
		})
	})

	t.Run("deleting the binding ends the open channels with 403", func(t *testing.T) {
		if err := admin.RbacV1().ClusterRoleBindings().Delete(ctx, ns+":node-proxier", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, ch := range []*watchmux.Channel{servicesCh, slicesCh, cidrsCh} {
			ev, _ := nextEvent(t, ch)
			if ev.Type != watch.Error || ev.Status.Code != http.StatusForbidden {
				t.Errorf("channel %d after the binding went: %s %+v", ch.ID, ev.Type, ev.Status)
			}
		}
	})
}

// startKubeProxyHub starts the hub on npPort with args, with the RBAC the
// bulk API needs, and makes namespace <prefix>-... with ServiceAccount
// kube-proxy bound, as kubeadm binds kube-proxy's, to system:node-proxier
// and, as the kube-proxy component binds it, to the bulk API's door. It
// returns the hub, an admin client and the namespace.
func startKubeProxyHub(t *testing.T, prefix string, args ...string) (*testserver.Server, kubernetes.Interface, string) {
	t.Helper()
	return startKubeProxyHubWith(t, prefix, testserver.Options{Args: args})
}

// startKubeProxyHubWith is startKubeProxyHub with the hub's options (on
// npPort, whatever opts.Port).
func startKubeProxyHubWith(t *testing.T, prefix string, opts testserver.Options) (*testserver.Server, kubernetes.Interface, string) {
	t.Helper()
	testserver.InstallRBAC(t, cp, "rbac-webhook.yaml", "rbac-bulk.yaml")
	opts.Port = npPort
	srv := testserver.Start(t, cp, opts)
	srv.WaitReady(t, 90*time.Second)
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	ns := bulke2e.Namespace(prefix)
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := cp.EnsureServiceAccount(ctx, ns, "kube-proxy"); err != nil {
		t.Fatal(err)
	}
	bind(t, admin, ns, "door", "nodeproxy:bulk-nodes", "kube-proxy")
	bind(t, admin, ns, "node-proxier", "system:node-proxier", "kube-proxy")
	return srv, admin, ns
}

// dialWatching dials the hub as cfg and opens a channel for each of ops,
// trying again until all are allowed (RBAC's informers, then the
// delegated authorizer's cache, where a denial is kept 10 s, hear of a
// binding a moment after it is stored), and reads each up to the end of
// its initial events. The caller closes the client.
func dialWatching(t *testing.T, cfg *rest.Config, ops ...v1alpha1.GetOperation) (*watchmux.Client, []*watchmux.Channel) {
	t.Helper()
	var c *watchmux.Client
	chs := make([]*watchmux.Channel, len(ops))
	testserver.Eventually(t, 30*time.Second, "the channels allowed", func(ctx context.Context) error {
		var err error
		if c == nil {
			if c, err = watchmux.Dial(ctx, cfg); err != nil {
				c = nil
				return err
			}
		}
		for i, op := range ops {
			if chs[i] == nil {
				if chs[i], err = c.Watch(ctx, op); err != nil {
					chs[i] = nil
					return err
				}
			}
		}
		return nil
	})
	for _, ch := range chs {
		untilInitialEnd(t, ch)
	}
	return c, chs
}

// untilInitialEnd reads ch's initial events up to the bookmark that ends
// them.
func untilInitialEnd(t *testing.T, ch *watchmux.Channel) {
	t.Helper()
	for {
		if ev, _ := nextEvent(t, ch); ev.Type == watch.Bookmark {
			return
		}
	}
}

// serviceAccountConfig makes ServiceAccount ns/name if missing and returns a client
// configuration of the hub with a token of it.
func serviceAccountConfig(t *testing.T, admin kubernetes.Interface, srv *testserver.Server, ns, name string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	if err := cp.EnsureServiceAccount(ctx, ns, name); err != nil {
		t.Fatal(err)
	}
	tok, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &rest.Config{Host: srv.URL, BearerToken: tok.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAFile: cp.ServingCA.CertPath}}
}

// bind binds ClusterRole role to the ServiceAccounts of ns named (none:
// to the group system:nodes), as ClusterRoleBinding <ns>:<name>, deleted
// when the test ends.
func bind(t *testing.T, admin kubernetes.Interface, ns, name, role string, accounts ...string) {
	t.Helper()
	b := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + ":" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
	}
	for _, a := range accounts {
		b.Subjects = append(b.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: a})
	}
	if len(accounts) == 0 {
		b.Subjects = []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}}
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(context.Background(), b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), b.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s: %v", b.Name, err)
		}
	})
}
