package hub_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// reviewBenchConnections is how many kube-proxies the benchmark stands
// for: one bulk watch connection each, each with a token of its own, as a
// DaemonSet's pods each get one (the "1,000 connections").
const reviewBenchConnections = 1000

// reviewBenchWindow is how long the reviews are counted, once every
// connection has been checked at least once (the first check comes 45 to
// 60 s after a connection opens).
const reviewBenchWindow = 3 * time.Minute

// BenchmarkReviewsPerMinuteAt1000Connections: 1,000 bulk watch
// connections on one hub with its default flags, each with a
// ServiceAccount token of its own bound to system:node-proxier and to a
// pod of its own on a node of its own (a kube-proxy DaemonSet's pod's
// projected token on each of 1,000 nodes: kubeProxyPodToken), each with
// kube-proxy's channels
// (Services, EndpointSlices, ServiceCIDRs, its Node). Nothing changes
// meanwhile. It counts, from kube-apiserver's apiserver_request_total,
// the TokenReviews and SubjectAccessReviews the hub sends a minute to
// keep them open (re-authentication of each connection, re-authorization
// of each RBAC-decided channel), over reviewBenchWindow; and what making
// them cost, a connection, as each costs again when it is made anew at
// its maximum age:
//
//	go test ./hub -run '^$' -bench ReviewsPerMinuteAt1000Connections -benchtime 1x -timeout 30m
func BenchmarkReviewsPerMinuteAt1000Connections(b *testing.B) {
	ctx := context.Background()
	testserver.InstallRBAC(b, cp, "rbac-webhook.yaml", "rbac-bulk.yaml")
	srv := testserver.Start(b, cp, testserver.Options{})
	srv.WaitReady(b, 90*time.Second)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	const ns, sa = "review-bench", "kube-proxy"
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		b.Fatal(err)
	}
	if err := cp.EnsureServiceAccount(ctx, ns, sa); err != nil {
		b.Fatal(err)
	}
	for _, role := range []string{"system:node-proxier", "nodeproxy:bulk-nodes"} {
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "review-bench:" + role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}},
		}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatal(err)
		}
	}

	for b.Loop() {
		scrape := func() (tokenReviews, accessReviews, checks, local float64) {
			m, err := controlplane.ScrapeAPIServer(ctx, admin.CoreV1().RESTClient())
			if err != nil {
				b.Fatal(err)
			}
			checks = testserver.Gathered(b, "nodeproxy_hub_reauthentications_total", nil)
			local = testserver.Gathered(b, "nodeproxy_hub_reauthentications_total", map[string]string{"decided_by": "local"})
			return m.Sum("apiserver_request_total", "resource", "tokenreviews"),
				m.Sum("apiserver_request_total", "resource", "subjectaccessreviews"), checks, local
		}
		// What a connection costs when it is made, as it is again at
		// its maximum age: its token's review, the bulk API's door and
		// each channel's authorization (an upper bound: a connection
		// refused while kube-apiserver's RBAC has not yet heard of the
		// bindings is made again, and counted again).
		trOpen0, sarOpen0, _, _ := scrape()
		conns := openKubeProxyConnections(b, srv)
		trOpen1, sarOpen1, _, _ := scrape()
		b.ReportMetric((trOpen1-trOpen0)/float64(len(conns)), "tokenreviews/connection-made")
		b.ReportMetric((sarOpen1-sarOpen0)/float64(len(conns)), "subjectaccessreviews/connection-made")
		// Every connection checked once: the first checks come 45 to 60 s
		// after it opened.
		time.Sleep(70 * time.Second)
		fallbacks := func() map[string]float64 {
			m := map[string]float64{}
			for _, reason := range []string{"stale", "missing", "distrusted", "unconfirmed"} {
				m[reason] = testserver.Gathered(b, "nodeproxy_hub_reauthentication_local_fallbacks_total", map[string]string{"reason": reason})
			}
			return m
		}
		tr0, sar0, checks0, local0 := scrape()
		fallbacks0 := fallbacks()
		time.Sleep(reviewBenchWindow)
		tr1, sar1, checks1, local1 := scrape()
		for reason, n := range fallbacks() {
			if n -= fallbacks0[reason]; n > 0 {
				b.Logf("checks reviewed rather than decided locally, %s: %.0f", reason, n)
			}
		}
		minutes := reviewBenchWindow.Minutes()
		b.ReportMetric((tr1-tr0)/minutes, "tokenreviews/min")
		b.ReportMetric((sar1-sar0)/minutes, "subjectaccessreviews/min")
		b.ReportMetric((checks1-checks0)/minutes, "reauthentications/min")
		b.ReportMetric((local1-local0)/minutes, "local-reauthentications/min")
		b.Logf("%d connections over %s: %.0f TokenReviews, %.0f SubjectAccessReviews on kube-apiserver; %.0f re-authentications by the hub, %.0f of them local; "+
			"making them cost %.0f TokenReviews and %.0f SubjectAccessReviews",
			len(conns), reviewBenchWindow, tr1-tr0, sar1-sar0, checks1-checks0, local1-local0, trOpen1-trOpen0, sarOpen1-sarOpen0)
		for _, c := range conns {
			_ = c.Close()
		}
	}
}

// openKubeProxyConnections opens reviewBenchConnections connections to
// srv, each with a token of its own (kubeProxyPodToken), each with
// kube-proxy's channels.
func openKubeProxyConnections(b *testing.B, srv *testserver.Server) []*watchmux.Client {
	b.Helper()
	ctx := context.Background()
	opts := metav1.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true}
	gvr := func(group, resource string) metav1.GroupVersionResource {
		return metav1.GroupVersionResource{Group: group, Version: "v1", Resource: resource}
	}
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	conns := make([]*watchmux.Client, reviewBenchConnections)
	var wg sync.WaitGroup
	errs := make(chan error, reviewBenchConnections)
	sem := make(chan struct{}, 16)
	for i := range conns {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			token, err := kubeProxyPodToken(ctx, admin, i)
			if err != nil {
				errs <- err
				return
			}
			cfg := &rest.Config{Host: srv.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: cp.ServingCA.CertPath}}
			byName := opts
			byName.FieldSelector = fields.OneTermEqualSelector("metadata.name", fmt.Sprintf("bench-node-%d", i)).String()
			ops := []v1alpha1.GetOperation{
				{Resource: gvr("", "services"), Options: opts},
				{Resource: gvr("discovery.k8s.io", "endpointslices"), Options: opts},
				{Resource: gvr("networking.k8s.io", "servicecidrs"), Options: opts},
				{Resource: gvr("", "nodes"), Options: byName},
			}
			// RBAC's informers hear of the bindings a moment after they
			// are stored: the first connections may be refused a while.
			open := func() error {
				c, err := watchmux.Dial(ctx, cfg)
				if err != nil {
					return err
				}
				for _, op := range ops {
					ch, err := c.Watch(ctx, op)
					if err != nil {
						_ = c.Close()
						return err
					}
					go func() {
						for range ch.Events {
						}
					}()
				}
				conns[i] = c
				return nil
			}
			deadline := time.Now().Add(time.Minute)
			for err := open(); err != nil; err = open() {
				if time.Now().After(deadline) {
					errs <- fmt.Errorf("connection %d: %w", i, err)
					return
				}
				time.Sleep(time.Second)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return conns
}

// kubeProxyPodToken is the projected token of kube-proxy's pod on node
// bench-node-i, as the kubelet would ask for it: pod review-bench/
// kube-proxy-i (created if missing, spec.nodeName set, as the DaemonSet
// controller creates it; no scheduler or kubelet runs here, so it stays
// pending) and a TokenRequest bound to it. The user kube-apiserver
// authenticates with it carries the pod's and the node's names in its
// extra, as a real kube-proxy's does.
func kubeProxyPodToken(ctx context.Context, admin kubernetes.Interface, i int) (string, error) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("kube-proxy-%d", i), Namespace: "review-bench"},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("bench-node-%d", i), ServiceAccountName: "kube-proxy",
			Containers: []corev1.Container{{Name: "kube-proxy", Image: "registry.k8s.io/kube-proxy:v1.36.3"}}}}
	created, err := admin.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = admin.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	}
	if err != nil {
		return "", fmt.Errorf("kube-proxy's pod on bench-node-%d: %w", i, err)
	}
	return cp.PodBoundToken(ctx, pod.Namespace, "kube-proxy", created)
}
