package endpoint_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeproxy/nodeproxy/endpoint"
)

// TestReadyzCostsKubeAPIServerABoundedNumberOfProbes: while the hub is
// down, /readyz depends on kube-apiserver's /readyz, which it asks as the
// node. Callers of the open ports (the metrics port listens on the
// network) make at most one such probe per endpoint.ReadyProbeInterval
// between them, and never read kube-apiserver's error text. The probes
// are counted at a proxy in front of the real kube-apiserver, which
// answers /readyz 500 with a detail that must not leak.
func TestReadyzCostsKubeAPIServerABoundedNumberOfProbes(t *testing.T) {
	const name, detail = "node-ready", "etcd-detail-for-operators-only"
	kp, err := cp.ClientCA.ClientCert("system:node:"+name, []string{"system:nodes"}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	var probes atomic.Int64
	front := inBetween(t, cp.URL, servingRoots(t), kp, func(w http.ResponseWriter, req *http.Request) bool {
		if req.URL.Path != "/readyz" {
			return false
		}
		probes.Add(1)
		http.Error(w, "[-]etcd failed: "+detail, http.StatusInternalServerError)
		return true
	})
	dead := "https://127.0.0.1:1" // nothing listens on port 1: the hub is down
	n := startNodeWith(t, name, nodeSpec{apiServer: front, hub: dead, kubelet: kp})
	healthy := startNode(t, "node-ready-ok", dead)

	const calls = 40
	start := time.Now()
	for i := range calls {
		url := n.metrics + "/readyz"
		if i%2 == 1 {
			url = n.kubelet.Host + "/readyz"
		}
		code, body := get(t, url, "") // anonymous, as anything on the network is
		if code != http.StatusServiceUnavailable {
			t.Fatalf("call %d: status %d, want 503 (no hub, kube-apiserver not ready): %s", i, code, body)
		}
		if strings.Contains(body, detail) || strings.Contains(body, "500") {
			t.Fatalf("call %d: kube-apiserver's error echoed to an anonymous caller: %q", i, body)
		}
	}
	// One probe for the first call, one more for each interval the calls
	// took: whatever the rate of calls, never one per call.
	allowed := 1 + int64(time.Since(start)/endpoint.ReadyProbeInterval) + 1
	if got := probes.Load(); got == 0 || got > allowed {
		t.Errorf("%d calls to /readyz made %d probes of kube-apiserver, want 1 to %d", calls, got, allowed)
	}
	if got := metric(t, healthy, `nodeproxy_node_ready_probes_total{result="error"}`); got == "0" {
		t.Errorf("failed probes not counted")
	}

	// With kube-apiserver ready the endpoint is ready without the hub.
	if code, body := get(t, healthy.metrics+"/readyz", ""); code != http.StatusOK {
		t.Errorf("no hub, kube-apiserver ready: status %d, want 200: %s", code, body)
	}
}
