package endpoint_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestRevokedTokenThroughTheEndpoint: a TokenRequest token bound to a
// Secret, allowed kube-proxy's reads and the bulk API's door, watches
// Services through a node endpoint, served by the hub over the token's
// own connection. The Secret is deleted: kube-apiserver refuses the token
// from then on (within its 10 s token cache). Within 70 s the watch
// through the endpoint ends, with kube-apiserver's 401 as its last event
// or followed by a 401 on the next request; a Service created after the
// revocation never reaches it. A new request with the token gets
// kube-apiserver's 401 through the endpoint, and the endpoint neither
// keeps the connection the hub closed on the token nor dials the hub with
// it again: its reads go to kube-apiserver until kube-apiserver accepts
// it again.
func TestRevokedTokenThroughTheEndpoint(t *testing.T) {
	ctx := context.Background()
	hub := startHub(t)
	n := startNode(t, "node-revoked", hub.URL)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	const ns = "revoked-endpoint"
	proxierToken(t, ns, "kube-proxy", true) // the account, its namespace and its roles
	token, holder, err := cp.SecretBoundToken(ctx, ns, "kube-proxy", "token-holder")
	if err != nil {
		t.Fatal(err)
	}
	proxy := asClient(n, token)
	count := func(series string) int {
		v, _ := strconv.Atoi(metric(t, n, series))
		return v
	}
	const (
		hubLists       = `nodeproxy_node_client_requests_total{path="hub",resource="services",verb="list"}`
		apiserverLists = `nodeproxy_node_client_requests_total{path="apiserver",resource="services",verb="list"}`
		hubWatches     = `nodeproxy_node_client_watches{path="hub",resource="services"}`
		connections    = `nodeproxy_node_client_hub_connections`
		refusedDials   = `nodeproxy_node_client_hub_dials_total{result="unauthorized"}`
		redialErrors   = `nodeproxy_watchmux_client_reconnects_total{result="error"}`
	)

	// kube-proxy's reflector on Services: a list, then a watch from it,
	// both through the hub.
	rv := servicesListedByHub(t, n, proxy, metav1.NamespaceAll)
	w, err := proxy.CoreV1().Services(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if got := metric(t, n, hubWatches); got != "1" {
		t.Fatalf("the token's watch of Services: %s on the hub, want 1", got)
	}

	// The watch's events, as they arrive, with when.
	type arrival struct {
		ev watch.Event
		ok bool
		at time.Time
	}
	arrivals := make(chan arrival, 100)
	go func() {
		for {
			ev, ok := <-w.ResultChan()
			arrivals <- arrival{ev, ok, time.Now()}
			if !ok {
				return
			}
		}
	}()

	if err := admin.CoreV1().Secrets(ns).Delete(ctx, holder.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	direct := kubernetes.NewForConfigOrDie(&rest.Config{Host: cp.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: cp.ServingCA.CertPath}})
	testserver.Eventually(t, 30*time.Second, "kube-apiserver refusing the token", func(ctx context.Context) error {
		if _, err := direct.CoreV1().Services(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
			return fmt.Errorf("kube-apiserver answers the token: %v", err)
		}
		return nil
	})
	refusedAfter := time.Since(revoked).Round(time.Second)
	if _, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "after-revocation"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The watch ends, with 401 or cleanly; never with the new Service.
	deadline := time.After(70*time.Second - time.Since(revoked))
	var ended string
	var endedAt time.Time
	for ended == "" {
		select {
		case a := <-arrivals:
			ev, ok := a.ev, a.ok
			endedAt = a.at
			switch {
			case !ok:
				ended = "cleanly"
			case ev.Type == watch.Error:
				st, _ := ev.Object.(*metav1.Status)
				if st == nil || st.Code != http.StatusUnauthorized || st.Reason != metav1.StatusReasonUnauthorized || st.Message != "Unauthorized" {
					t.Fatalf("the watch ended with %#v, want kube-apiserver's 401 Unauthorized", ev.Object)
				}
				ended = "with 401"
			case ev.Type == watch.Bookmark:
			default:
				if svc, _ := ev.Object.(*corev1.Service); svc != nil && svc.Name == "after-revocation" {
					t.Fatalf("a Service created after the revocation reached the revoked token's watch (%s after the Secret was deleted)", time.Since(revoked).Round(time.Second))
				}
			}
		case <-deadline:
			t.Fatalf("the watch through the endpoint is open 70 s after the Secret was deleted (kube-apiserver refused the token after %s)", refusedAfter)
		}
	}
	t.Logf("the watch through the endpoint ended %s %s after the Secret was deleted (kube-apiserver refused the token after %s)", ended, endedAt.Sub(revoked).Round(time.Millisecond), refusedAfter)

	// A new request with the token: kube-apiserver's 401, from
	// kube-apiserver through the endpoint.
	newRequest := func() {
		t.Helper()
		before := count(apiserverLists)
		_, err := proxy.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if !apierrors.IsUnauthorized(err) || !strings.Contains(err.Error(), "Unauthorized") {
			t.Fatalf("a new request with the revoked token: %v, want kube-apiserver's 401", err)
		}
		if count(apiserverLists) == before {
			t.Fatalf("the new request with the revoked token was not sent to kube-apiserver (its list on the hub: %s)", metric(t, n, hubLists))
		}
	}
	newRequest()

	// The endpoint keeps no connection for the token, and does not dial
	// the hub with it again: neither its session (a redial the hub
	// would refuse) nor a later read (a dial the hub would refuse).
	testserver.Eventually(t, 10*time.Second, "the revoked token's connection out of the table", func(context.Context) error {
		if got := metric(t, n, connections); got != "0" {
			return fmt.Errorf("%s client connections in the table", got)
		}
		return nil
	})
	dials, redials := count(refusedDials), count(redialErrors)
	// Past the first steps of both backoffs (the session's redials, 100
	// ms doubling; a refused token's dial at a read, after 5 s).
	time.Sleep(12 * time.Second)
	newRequest()
	if got := count(refusedDials) - dials; got != 0 {
		t.Errorf("the endpoint dialed the hub %d times with the token the hub refused", got)
	}
	if got := count(redialErrors) - redials; got != 0 {
		t.Errorf("%d failed redials of hub connections after the token's connection was refused", got)
	}
}
