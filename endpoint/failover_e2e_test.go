package endpoint_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/forwarder"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestKubeletWatchOutlivesItsHubReplica: two hub replicas, processes,
// behind one address as behind a Service; the replica carrying the
// node's bulk watch is killed (SIGKILL: the socket just dies) or stopped
// (SIGTERM: ERROR 503, then close) while its secret changes. The
// kubelet's watch, the one the secret manager opens per object, must not
// notice: it does not end, it does not move to kube-apiserver, and it
// receives every change once, in order.
func TestKubeletWatchOutlivesItsHubReplica(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(*controlplane.Nodeproxy)
	}{
		{"SIGKILL", func(np *controlplane.Nodeproxy) { np.Process.Kill() }},
		{"SIGTERM", func(np *controlplane.Nodeproxy) { np.Process.Terminate(time.Minute) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ports, err := controlplane.FreePorts(2)
			if err != nil {
				t.Fatal(err)
			}
			a, err := cp.StartNodeproxy(ctx, bin, ports[0])
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(a.Process.Kill)
			b, err := a.StartReplica(ctx, ports[1], "nodeproxy-b")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(b.Process.Kill)
			addrA, addrB := "127.0.0.1:"+strconv.Itoa(a.Port), "127.0.0.1:"+strconv.Itoa(b.Port)
			fwd, err := forwarder.Start(addrA) // the endpoint's connection lands on a
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = fwd.Close() })

			node := "node-fo-" + strings.ToLower(tc.name)
			kp, err := cp.ClientCA.ClientCert("system:node:"+node, []string{"system:nodes"}, "", "")
			if err != nil {
				t.Fatal(err)
			}
			// The hub channel's path: a copy's watches are the copy's.
			n := startNodeWith(t, node, nodeSpec{hub: "https://" + fwd.Addr(), kubelet: kp, noView: true})
			ns := workload(t, node)
			testserver.Eventually(t, 30*time.Second, "the hub connected", func(context.Context) error {
				if got := metric(t, n, "nodeproxy_node_hub_connected"); got != "1" {
					return fmt.Errorf("hub_connected %s", got)
				}
				return nil
			})
			before := watchCounts(t, n)

			kubelet := kubernetes.NewForConfigOrDie(n.kubelet)
			byName := fields.OneTermEqualSelector("metadata.name", "s").String()
			list, err := kubelet.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{FieldSelector: byName})
			if err != nil {
				t.Fatal(err)
			}
			w, err := kubelet.CoreV1().Secrets(ns).Watch(ctx, metav1.ListOptions{FieldSelector: byName, ResourceVersion: list.ResourceVersion})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()

			fwd.Add(addrB) // b joins the Service; the endpoint stays on a
			const each = 5
			want := rotations(t, ns, "s", "before", each)
			got := readNewer(t, w, each, list.ResourceVersion)
			fwd.Remove(addrA) // a leaves the Service, then goes
			tc.end(a)
			want = append(want, rotations(t, ns, "s", "after", each)...)
			got = append(got, readNewer(t, w, each, got[len(got)-1].rv)...)
			if fmt.Sprint(passwords(got)) != fmt.Sprint(want) {
				t.Fatalf("the kubelet's watch saw %v; want %v, each once, in order", passwords(got), want)
			}

			after := watchCounts(t, n)
			if d := after.hub - before.hub; d != 1 {
				t.Errorf("%d secrets watches opened through the hub; want 1: the kubelet's watch ended and came back", d)
			}
			if d := after.apiserver - before.apiserver; d != 0 {
				t.Errorf("%d secrets watches went to kube-apiserver; want 0", d)
			}
			if d := after.reopened - before.reopened; d < 1 {
				t.Errorf("%d channels reopened on the other replica; want at least 1", d)
			}
		})
	}
}

// watchCounts are the endpoint's counters a failover moves; the metrics
// registry is the test process's, so a test compares its own before and
// after.
type counts struct{ hub, apiserver, reopened int }

func watchCounts(t *testing.T, n *node) counts {
	t.Helper()
	get := func(series string) int {
		v, err := strconv.ParseFloat(metric(t, n, series), 64)
		if err != nil {
			t.Fatalf("%s: %v", series, err)
		}
		return int(v)
	}
	return counts{
		hub:       get(`nodeproxy_node_requests_total{path="hub",resource="secrets",verb="watch"}`),
		apiserver: get(`nodeproxy_node_requests_total{path="apiserver",resource="secrets",verb="watch"}`),
		reopened:  get(`nodeproxy_watchmux_client_resumes_total{outcome="reopened"}`),
	}
}

// rotations rotates secret name in ns n times, to prefix-0, prefix-1, ...,
// and returns the passwords it wrote, in order.
func rotations(t *testing.T, ns, name, prefix string, n int) []string {
	t.Helper()
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s-%d", prefix, i))
		rotate(t, ns, name, out[len(out)-1])
	}
	return out
}
