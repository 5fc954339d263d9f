package endpoint_test

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// churnChanges is TestKubeProxySeesEveryChangeInOrder's number of
// changes; more makes its -cpuprofile a profile of the relay under churn
// (docs/benchmarks.md, "The node endpoint's relay").
var churnChanges = flag.Int("churn-changes", 200, "EndpointSlice changes TestKubeProxySeesEveryChangeInOrder writes")

// TestKubeProxySeesEveryChangeInOrder: an EndpointSlice changed again and
// again reaches kube-proxy's protobuf watch through the hub and the
// endpoint once per change, in order, each passed through as the hub sent
// it. One change is written when the last one has been seen, so the
// process (the hub, the endpoint and the watching client; kube-apiserver
// is another) spends its CPU on one event at a time.
func TestKubeProxySeesEveryChangeInOrder(t *testing.T) {
	n, ns, proxyConfig, es := kubeProxyBehindEndpoint(t, "node-churn")
	ctx := context.Background()
	slices := kubernetes.NewForConfigOrDie(cp.AdminConfig()).DiscoveryV1().EndpointSlices(ns)
	proxy := kubernetes.NewForConfigOrDie(proxyConfig)
	w, err := proxy.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{
		LabelSelector: "!service.kubernetes.io/headless", ResourceVersion: es.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	const passed = `nodeproxy_node_hub_watch_events_total{encoding="passed_through"}`
	before := counter(t, n, passed)
	for i := range *churnChanges {
		address := fmt.Sprintf("10.0.%d.%d", i/250%250, i%250)
		patch := fmt.Sprintf(`{"endpoints":[{"addresses":[%q],"conditions":{"ready":true},"nodeName":"node-churn"}]}`, address)
		changed, err := slices.Patch(ctx, "web-1", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("change %d: the watch ended", i)
			}
			got, _ := ev.Object.(*discoveryv1.EndpointSlice)
			if ev.Type != watch.Modified || got == nil || got.ResourceVersion != changed.ResourceVersion || got.Endpoints[0].Addresses[0] != address {
				t.Fatalf("change %d to %s at %s: got %s %v", i, address, changed.ResourceVersion, ev.Type, ev.Object)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("change %d: no event within 30 s", i)
		}
	}
	if got := counter(t, n, passed) - before; got < float64(*churnChanges) {
		t.Errorf("%s grew by %v over %d changes", passed, got, *churnChanges)
	}
}
