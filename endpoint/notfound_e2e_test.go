package endpoint_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// TestHubPath404GoesToKubeAPIServer: something between the endpoint and
// the hub (here a proxy that passes the bulk watch websocket through but
// answers 404 to bulk gets, as a replica without the API or a wrong
// route would) is not the hub, and its 404 is not an answer about the
// object: the kubelet's read goes to kube-apiserver, which serves it,
// and the fallback is counted as not_found.
func TestHubPath404GoesToKubeAPIServer(t *testing.T) {
	hub := startHub(t)
	const name = "node-404"
	kp, err := cp.ClientCA.ClientCert("system:node:"+name, []string{"system:nodes"}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	var refusedGets atomic.Int64
	// Passes the bulk watch websocket to the hub, refuses bulk gets.
	between := inBetween(t, hub.URL, hub.CA, kp, func(w http.ResponseWriter, req *http.Request) bool {
		if req.Method != http.MethodPost || req.URL.Path != watchmux.Path {
			return false
		}
		refusedGets.Add(1)
		http.NotFound(w, req)
		return true
	})
	// The bulk get's path: a copy of the node's view would answer the
	// read on the node.
	n := startNodeWith(t, name, nodeSpec{hub: between, kubelet: kp, noView: true})
	ns := workload(t, name)
	kubelet := kubernetes.NewForConfigOrDie(n.kubelet)
	counter := func(series string) float64 {
		t.Helper()
		v, err := strconv.ParseFloat(metric(t, n, series), 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	const notFound = `nodeproxy_node_hub_fallbacks_total{reason="not_found"}`
	const proxied = `nodeproxy_node_requests_total{path="apiserver",resource="secrets",verb="get"}`
	// Until the bulk watch websocket is up through the in-between, reads
	// fall back as "down"; then every bulk get meets the 404.
	testserver.Eventually(t, 60*time.Second, "a get that met the in-between's 404", func(ctx context.Context) error {
		before, proxiedBefore := counter(notFound), counter(proxied)
		s, err := kubelet.CoreV1().Secrets(ns).Get(ctx, "s", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			t.Fatalf("the kubelet was told the secret does not exist: the in-between's 404 was taken for the hub's answer: %v", err)
		}
		if err != nil {
			return err
		}
		if string(s.Data["password"]) != "pw-s" {
			t.Fatalf("secret read %q", s.Data["password"])
		}
		if counter(notFound) == before {
			return errors.New("no not_found fallback yet (the hub connection is not up)")
		}
		if counter(proxied) == proxiedBefore {
			t.Fatalf("the read fell back but was not counted as proxied to kube-apiserver")
		}
		return nil
	})
	if refusedGets.Load() == 0 {
		t.Fatal("the in-between never saw a bulk get")
	}
	// kube-apiserver decides what the hub would have: the Node
	// authorizer refuses a secret no pod of the node uses.
	if _, err := kubelet.CoreV1().Secrets(ns).Get(context.Background(), "other", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("a secret no pod of the node uses: %v, want 403 from kube-apiserver", err)
	}
}
