package endpoint_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// hollowProxies is how many nodes TestHollowProxies runs, each an
// endpoint with a hollow proxy behind it: enough to show that
// kube-apiserver's watches do not grow with nodes.
const hollowProxies = 2

// proxyWatched are the types a hollow proxy watches (kube-proxy without
// its Node, which the hollow proxy does not watch).
var proxyWatched = []string{"services", "endpointslices", "servicecidrs"}

// TestHollowProxies runs real kube-proxy code (kubemark --morph=proxy),
// each with a ServiceAccount token of its own bound as kubeadm binds
// kube-proxy's, behind node endpoints, from a boot with the hub not yet
// reachable (as on a node whose Service rules kube-proxy has still to
// write) to the hub up, down and back:
//
//   - first, their lists and watches go to kube-apiserver through the
//     endpoints, with their own tokens, and they sync;
//   - once the hub is up, every watch moves to it, and kube-apiserver
//     carries no watch of theirs: its long-running requests for their
//     types are the hub's own, whatever the number of nodes;
//   - a Service's and an EndpointSlice's changes reach every proxy, as the
//     proxies themselves report;
//   - with the hub stopped, they fall back to kube-apiserver and still see
//     changes; with the hub back, their watches return to it.
func TestHollowProxies(t *testing.T) {
	ctx := context.Background()
	tools, err := controlplane.EnsureTools(ctx, os.Stderr, "kubemark")
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	testserver.InstallRBAC(t, cp, "rbac-webhook.yaml", "rbac-bulk.yaml")
	if err := cp.ApplyFiles(ctx, "../manifests/components/kube-proxy/rbac-bulk-clients.yaml"); err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("proxied-%d", runs.Add(1))
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// No hub yet: the watches on kube-apiserver now are nobody's of
	// nodeproxy's.
	before, err := controlplane.ReadLongRunningRequests(ctx, admin.CoreV1().RESTClient())
	if err != nil {
		t.Fatal(err)
	}

	hubPort := freePort(t)
	hubURL := fmt.Sprintf("https://127.0.0.1:%d", hubPort)
	var nodes []*node
	var proxies []*controlplane.HollowProxy
	for i := range hollowProxies {
		n := startNode(t, fmt.Sprintf("proxied-%s-%d", ns, i), hubURL)
		nodes = append(nodes, n)
		dir := t.TempDir()
		kubeconfig := dir + "/kubeconfig"
		server := controlplane.ProxyServer{URL: n.kubelet.Host, CAPEM: n.kubelet.CAData}
		if err := cp.EnsureKubeProxyRBAC(ctx); err != nil {
			t.Fatal(err)
		}
		if err := cp.ServiceAccountKubeconfig(ctx, controlplane.KubeProxyNamespace, controlplane.KubeProxyServiceAccount, server, kubeconfig); err != nil {
			t.Fatal(err)
		}
		p, err := controlplane.StartHollowProxy(tools["kubemark"], controlplane.HollowProxyOptions{Name: n.name, Kubeconfig: kubeconfig, Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Stop) // before the endpoint's cleanup
		proxies = append(proxies, p)
	}
	for _, p := range proxies {
		if err := p.WaitSynced(ctx); err != nil {
			t.Fatalf("a hollow proxy with the hub unreachable (its first sync through kube-apiserver): %v", err)
		}
	}
	if got := metric(t, nodes[0], `nodeproxy_node_client_requests_total{path="apiserver",resource="services",verb="watch"}`); got == "0" {
		t.Errorf("the proxies' first watches of services did not go to kube-apiserver")
	}

	// The hub comes up: every proxy watch moves to it. The endpoints run
	// in this process and count into one registry: the gauges are every
	// node's.
	hub := startHubOn(t, hubPort)
	onTheHub := func(t *testing.T) {
		for _, resource := range proxyWatched {
			testserver.Eventually(t, time.Minute, "the proxies watch "+resource+" through the hub", func(context.Context) error {
				onHub := metric(t, nodes[0], `nodeproxy_node_client_watches{path="hub",resource="`+resource+`"}`)
				proxied := metric(t, nodes[0], `nodeproxy_node_client_watches{path="apiserver",resource="`+resource+`"}`)
				if onHub != fmt.Sprint(hollowProxies) || proxied != "0" {
					dials := ""
					for _, r := range []string{"ok", "error", "forbidden", "unauthorized", "throttled", "full"} {
						dials += r + "=" + metric(t, nodes[0], `nodeproxy_node_client_hub_dials_total{result="`+r+`"}`) + " "
					}
					return fmt.Errorf("%s on the hub, %s on kube-apiserver, want one per proxy (%d) on the hub; dials %s; returned %s; connections %s", onHub, proxied, hollowProxies,
						dials, metric(t, nodes[0], "nodeproxy_node_watches_returned_to_hub_total"), metric(t, nodes[0], "nodeproxy_node_client_hub_connections"))
				}
				return nil
			})
		}
	}
	onTheHub(t)
	// One watch a type, the hub's own informer, however many nodes. The
	// hub's probes for consistent reads are watches too, for a second or
	// two each (docs/api.md, "Which resourceVersion gives what"): the
	// count is awaited until they have ended, not read once.
	testserver.Eventually(t, 30*time.Second, "kube-apiserver carries only the hub's watches", func(ctx context.Context) error {
		after, err := controlplane.ReadLongRunningRequests(ctx, admin.CoreV1().RESTClient())
		if err != nil {
			return err
		}
		grown := after.Minus(before)
		for _, resource := range proxyWatched {
			if got := grown.Count("WATCH", resource); got != 1 {
				return fmt.Errorf("kube-apiserver's %s watches grew by %d with %d proxied nodes and the hub, want 1 (the hub's): %s",
					resource, got, hollowProxies, grown)
			}
		}
		return nil
	})

	// Changes reach every proxy, through the hub.
	sawChanges := func(t *testing.T, round string) {
		marks := controlplane.MarkHollowProxies(proxies)
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web-" + round},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}, Selector: map[string]string{"app": "web"}},
		}
		if _, err := admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := controlplane.WaitHollowProxies(ctx, proxies, "Service "+svc.Name,
			controlplane.ProxySaw(marks, controlplane.ProxyService, controlplane.ProxyAdded, "", 1)); err != nil {
			t.Fatal(err)
		}
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "web-" + round + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}}},
			Ports:       []discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}},
		}
		if _, err := admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		address := 1
		if err := cp.WaitHollowProxiesSawUpdate(ctx, proxies, ns, func(ctx context.Context) error {
			address++
			s, err := admin.DiscoveryV1().EndpointSlices(ns).Get(ctx, slice.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.1.0.%d", address)}})
			_, err = admin.DiscoveryV1().EndpointSlices(ns).Update(ctx, s, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatalf("an EndpointSlice's change (%s): %v", round, err)
		}
	}
	// kube-proxy's own code asks for protobuf, and the hub's bytes are
	// what it gets (TestWatchEventsAreKubeAPIServersBytes checks them).
	passed, reencoded := `nodeproxy_node_hub_watch_events_total{encoding="passed_through"}`, `nodeproxy_node_hub_watch_events_total{encoding="reencoded"}`
	passedBefore, reencodedBefore := counter(t, nodes[0], passed), counter(t, nodes[0], reencoded)
	sawChanges(t, "hub")
	if p, r := counter(t, nodes[0], passed), counter(t, nodes[0], reencoded); p < passedBefore+2*hollowProxies || r != reencodedBefore {
		t.Errorf("the proxies' service and slice events: %s grew by %v, %s by %v; want at least %d and 0",
			passed, p-passedBefore, reencoded, r-reencodedBefore, 2*hollowProxies)
	}

	// The hub goes: the proxies' watches fall back to kube-apiserver, with
	// their own tokens, and changes still reach them.
	hub.Stop(t)
	testserver.Eventually(t, time.Minute, "the proxies watch kube-apiserver", func(context.Context) error {
		if got := metric(t, nodes[0], `nodeproxy_node_client_watches{path="apiserver",resource="endpointslices"}`); got != fmt.Sprint(hollowProxies) {
			return fmt.Errorf("%s endpointslices watches on kube-apiserver, want %d", got, hollowProxies)
		}
		return nil
	})
	sawChanges(t, "fallback")

	// The hub is back: the watches return to it.
	startHubOn(t, hubPort)
	onTheHub(t)
	sawChanges(t, "back")
}
