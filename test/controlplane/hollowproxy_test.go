package controlplane

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// TestHollowProxiesWatchWithTheirOwnTokens runs three hollow proxies
// against kube-apiserver, each with a token of its own for kube-proxy's
// ServiceAccount, bound as kubeadm binds it, and checks what a proxy in
// front of kube-apiserver will have to carry for them: each holds one
// watch of Services, EndpointSlices and ServiceCIDRs; a Service and its
// EndpointSlice, and a change of the slice's endpoints, reach every
// proxy's handlers, as the proxy itself logs; a headless Service and its
// slice do not (kube-proxy's field and label selectors).
func TestHollowProxiesWatchWithTheirOwnTokens(t *testing.T) {
	ctx := context.Background()
	bin := kubemarkBinary(t)
	admin := clientFor(t, cp.AdminConfig())
	const ns = "hollow-proxy"
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// Runs after the proxies stop (cleanups run last first); there is no
	// namespace controller to empty the namespace.
	t.Cleanup(func() {
		ctx := context.Background()
		for _, name := range []string{"web", "db", "service-fence"} {
			_ = admin.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{})
		}
		for _, name := range []string{"web-1", "db-1"} {
			_ = admin.DiscoveryV1().EndpointSlices(ns).Delete(ctx, name, metav1.DeleteOptions{})
		}
		if err := cp.DeleteProxyFences(ctx, ns); err != nil {
			t.Error(err)
		}
	})
	before, err := ReadLongRunningRequests(ctx, admin.CoreV1().RESTClient())
	if err != nil {
		t.Fatal(err)
	}
	proxies, err := cp.StartHollowProxies(ctx, bin, HollowProxiesOptions{Count: 3, NamePrefix: "hollow-proxy", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range proxies {
		t.Cleanup(p.Stop)
	}
	for _, p := range proxies {
		if err := p.WaitSynced(ctx); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("each has a token of its own, as kube-proxy", func(t *testing.T) {
		seen := map[string]string{}
		for _, p := range proxies {
			kc, err := clientcmd.LoadFromFile(p.Kubeconfig)
			if err != nil {
				t.Fatal(err)
			}
			token := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo].Token
			if other, ok := seen[token]; ok {
				t.Errorf("%s and %s share a token", other, p.Name)
			}
			seen[token] = p.Name
			review, err := admin.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
				Spec: authenticationv1.TokenReviewSpec{Token: token},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want := "system:serviceaccount:" + KubeProxyNamespace + ":" + KubeProxyServiceAccount
			if !review.Status.Authenticated || review.Status.User.Username != want {
				t.Errorf("%s's token: authenticated %v as %q (%s), want %s", p.Name, review.Status.Authenticated, review.Status.User.Username, review.Status.Error, want)
			}
		}
	})

	t.Run("each holds one watch of each kind", func(t *testing.T) {
		var grown LongRunningRequests
		last := fmt.Errorf("not read yet")
		// The gauge moves when kube-apiserver's handler starts and ends a
		// request, after the proxy logs its sync; poll until it settles.
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, proxyDeliveryTimeout, true, func(ctx context.Context) (bool, error) {
			now, err := ReadLongRunningRequests(ctx, admin.CoreV1().RESTClient())
			if err != nil {
				last = err
				return false, nil
			}
			grown = now.Minus(before)
			for _, resource := range []string{"services", "endpointslices", "servicecidrs"} {
				if n := grown.Count("WATCH", resource); n != len(proxies) {
					last = fmt.Errorf("WATCH %s grew by %d, want %d", resource, n, len(proxies))
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("%v (last: %v; since the proxies started: %s)", err, last, grown)
		}
		t.Logf("apiserver_longrunning_requests since the proxies started: %s", grown)
	})

	marks := MarkHollowProxies(proxies)
	web := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Port: 80}},
		},
	}
	headless := web.DeepCopy()
	headless.Name, headless.Spec.Selector, headless.Spec.ClusterIP = "db", map[string]string{"app": "db"}, corev1.ClusterIPNone
	for _, s := range []*corev1.Service{web, headless} {
		if _, err := admin.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create service %s: %v", s.Name, err)
		}
	}
	webSlice := endpointSlice("web-1", "web", "10.0.0.1")
	headlessSlice := endpointSlice("db-1", "db", "10.0.0.2")
	// What the EndpointSlice controller labels a headless Service's
	// slices with, and kube-proxy's selector leaves out.
	headlessSlice.Labels[corev1.IsHeadlessService] = ""
	for _, es := range []*discoveryv1.EndpointSlice{webSlice, headlessSlice} {
		if _, err := admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create endpointslice %s: %v", es.Name, err)
		}
	}

	t.Run("the service and its slice reach every proxy, the headless ones none", func(t *testing.T) {
		if err := WaitHollowProxies(ctx, proxies, "slice web-1", ProxySaw(marks, ProxyEndpointSlice, ProxyAdded, ns+"/web-1", 1)); err != nil {
			t.Fatal(err)
		}
		// The fence comes after db-1 on the same watch: had db-1 been
		// sent, its add would be logged by now.
		if err := cp.WaitHollowProxiesCaughtUp(ctx, proxies, ns); err != nil {
			t.Fatal(err)
		}
		for _, p := range proxies {
			if err := ProxySaw(marks, ProxyEndpointSlice, ProxyAdded, ns+"/db-1", 1)(p); err == nil {
				t.Errorf("%s received the headless service's slice db-1", p.Name)
			}
		}
		// Service lines name nothing; their count does. A Service created
		// and deleted after db is a fence on the Services watch: once its
		// deletion is logged, everything before it is, and the adds are
		// web's and the fence's alone.
		fence := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "service-fence"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
		if _, err := admin.CoreV1().Services(ns).Create(ctx, fence, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := admin.CoreV1().Services(ns).Delete(ctx, fence.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := WaitHollowProxies(ctx, proxies, "service fence deleted", ProxySaw(marks, ProxyService, ProxyDeleted, "", 1)); err != nil {
			t.Fatal(err)
		}
		for _, p := range proxies {
			if n := CountProxyEvents(p.Log.Since(marks[p]), ProxyService, ProxyAdded); n != 2 {
				t.Errorf("%s logged %d Service adds, want 2 (web and the fence; not the headless db)", p.Name, n)
			}
		}
	})

	t.Run("a change of the slice's endpoints reaches every proxy", func(t *testing.T) {
		next := 10
		err := cp.WaitHollowProxiesSawUpdate(ctx, proxies, ns, func(ctx context.Context) error {
			es, err := admin.DiscoveryV1().EndpointSlices(ns).Get(ctx, "web-1", metav1.GetOptions{})
			if err != nil {
				return err
			}
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.0.1.%d", next)}})
			next++
			_, err = admin.DiscoveryV1().EndpointSlices(ns).Update(ctx, es, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// kubemarkBinary builds kubemark if it is missing (EnsureTools) and
// returns its path.
func kubemarkBinary(t *testing.T) string {
	t.Helper()
	paths, err := EnsureTools(context.Background(), os.Stderr, "kubemark")
	if err != nil {
		t.Fatal(err)
	}
	return paths["kubemark"]
}

// endpointSlice is an IPv4 EndpointSlice of service with one ready
// endpoint at address, port 80, as the EndpointSlice controller makes.
func endpointSlice(name, service, address string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{discoveryv1.LabelServiceName: service},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{address}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}},
	}
}

// TestHollowProxyWithoutBindingIsRefused gives a hollow proxy the token of
// a ServiceAccount nothing binds: kube-apiserver refuses its lists (the
// reflector falls back to a plain list when its WatchList is refused),
// and it says so in its log, for each kind.
func TestHollowProxyWithoutBindingIsRefused(t *testing.T) {
	ctx := context.Background()
	bin := kubemarkBinary(t)
	proxies, err := cp.StartHollowProxies(ctx, bin, HollowProxiesOptions{
		Count: 1, NamePrefix: "unbound-proxy", ServiceAccount: "kube-proxy-unbound", Dir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxies[0].Stop)
	resources := map[ProxyKind]string{ProxyService: "services", ProxyEndpointSlice: "endpointslices", ProxyServiceCIDR: "servicecidrs"}
	err = WaitHollowProxies(ctx, proxies, "lists refused", func(p *HollowProxy) error {
		for kind, resource := range resources {
			found := false
			for _, e := range p.Log.Events() {
				found = found || e.Kind == kind && e.Type == ProxyRefused && strings.Contains(e.Detail, `cannot list resource "`+resource+`"`)
			}
			if !found {
				return fmt.Errorf("no refused list of %s logged", resource)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range ProxyKinds {
		if proxies[0].Log.Synced(kind) {
			t.Errorf("refused proxy synced %s", kind)
		}
	}
}
