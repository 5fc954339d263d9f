package endpoint_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestBadTokensCannotKeepKubeProxyOffTheHub: a local process sends 16
// made-up bearer tokens, each until the endpoint has dialed the hub with
// it and been refused, as many as the table of client connections
// holds. kube-proxy, already watching through the hub, keeps its
// connection; its next token (the kubelet rotates a projected
// ServiceAccount token about hourly) is then served by the hub, not by
// kube-apiserver.
func TestBadTokensCannotKeepKubeProxyOffTheHub(t *testing.T) {
	ctx := context.Background()
	hub := startHub(t)
	n := startNode(t, "node-bad-tokens", hub.URL)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := proxierToken(t, "bad-tokens", "kube-proxy", true)
	byName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", n.name).String()}

	// kube-proxy with its first token watches its Node through the hub.
	proxy := asClient(n, first)
	testserver.Eventually(t, 30*time.Second, "kube-proxy's first token on the hub", func(ctx context.Context) error {
		list, err := proxy.CoreV1().Nodes().List(ctx, byName)
		if err != nil {
			return err
		}
		if got := metric(t, n, `nodeproxy_node_client_requests_total{path="hub",resource="nodes",verb="list"}`); got == "0" {
			return fmt.Errorf("the list went to kube-apiserver")
		}
		byName.ResourceVersion = list.ResourceVersion
		return nil
	})
	w, err := proxy.CoreV1().Nodes().Watch(ctx, byName)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	onHub := func(resource string) string {
		return metric(t, n, `nodeproxy_node_client_watches{path="hub",resource="`+resource+`"}`)
	}
	if got := onHub("nodes"); got != "1" {
		t.Fatalf("kube-proxy's watch of its Node: %s on the hub, want 1", got)
	}

	// The flood: 16 made-up tokens, each sent until the hub has refused
	// it to the endpoint. Every read gets kube-apiserver's 401.
	unauthorized := func() int {
		v, _ := strconv.Atoi(metric(t, n, `nodeproxy_node_client_hub_dials_total{result="unauthorized"}`))
		return v
	}
	before := unauthorized()
	testserver.Eventually(t, time.Minute, "16 made-up tokens refused by the hub", func(ctx context.Context) error {
		for i := range 16 {
			_, err := asClient(n, fmt.Sprintf("made-up-%d", i)).CoreV1().Nodes().List(ctx, byName)
			var status apierrors.APIStatus
			if !errorsAs(err, &status) || status.Status().Code != http.StatusUnauthorized {
				t.Fatalf("made-up token %d: %v, want 401", i, err)
			}
		}
		if got := unauthorized() - before; got < 16 {
			return fmt.Errorf("%d refused by the hub", got)
		}
		return nil
	})

	// kube-proxy's first token keeps its connection and its watch.
	if got := onHub("nodes"); got != "1" {
		t.Errorf("after the flood, kube-proxy's watch of its Node: %s on the hub, want 1", got)
	}
	// Its next token: a reflector on Services, as kube-proxy's, served by
	// the hub.
	next, err := admin.CoreV1().ServiceAccounts("bad-tokens").CreateToken(ctx, "kube-proxy", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rotated := asClient(n, next.Status.Token)
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for watchCtx.Err() == nil {
			list, err := rotated.CoreV1().Services("default").List(watchCtx, metav1.ListOptions{})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			w, err := rotated.CoreV1().Services("default").Watch(watchCtx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for range w.ResultChan() {
			}
		}
	}()
	testserver.Eventually(t, time.Minute, "kube-proxy's next token on the hub", func(context.Context) error {
		if got := onHub("services"); got != "1" {
			return fmt.Errorf("%s watches of services on the hub (%s on kube-apiserver); client dials: full %s, throttled %s, ok %s", got,
				metric(t, n, `nodeproxy_node_client_watches{path="apiserver",resource="services"}`),
				metric(t, n, `nodeproxy_node_client_hub_dials_total{result="full"}`),
				metric(t, n, `nodeproxy_node_client_hub_dials_total{result="throttled"}`),
				metric(t, n, `nodeproxy_node_client_hub_dials_total{result="ok"}`))
		}
		return nil
	})
	if got := onHub("nodes"); got != "1" {
		t.Errorf("at the end, kube-proxy's first watch of its Node: %s on the hub, want 1", got)
	}
}
