package endpoint_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// bigListServices is how many Services TestBigListsSyncThroughTheEndpoint
// makes: more than one page of the hub's answers.
const bigListServices = 10000

// createServices creates n headless Services in ns, concurrently (a
// headless Service takes no ClusterIP, of which the test cluster's range
// holds far fewer).
func createServices(t *testing.T, ns string, n int) {
	t.Helper()
	ctx := context.Background()
	cfg := rest.CopyConfig(cp.AdminConfig())
	cfg.QPS, cfg.Burst = -1, 0
	admin := kubernetes.NewForConfigOrDie(cfg)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	next := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				svc := &corev1.Service{
					ObjectMeta: metav1.ObjectMeta{Name: "svc-" + strconv.Itoa(i)},
					Spec: corev1.ServiceSpec{
						ClusterIP: corev1.ClusterIPNone,
						Selector:  map[string]string{"app": "svc-" + strconv.Itoa(i)},
						Ports:     []corev1.ServicePort{{Name: "http", Port: 80}},
					},
				}
				if _, err := admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
					select {
					case errs <- fmt.Errorf("create Service %d: %w", i, err):
					default:
					}
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

// syncServices runs an informer of Services through client, as kube-proxy's
// and the kubelet's run, and returns how long it took to sync and how
// many Services it then held, or fails after timeout.
func syncServices(t *testing.T, who string, client kubernetes.Interface, timeout time.Duration) (time.Duration, int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Core().V1().Services().Informer()
	start := time.Now()
	factory.Start(ctx.Done())
	syncCtx, syncCancel := context.WithTimeout(ctx, timeout)
	defer syncCancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		t.Fatalf("%s's informer of Services did not sync within %s", who, timeout)
	}
	return time.Since(start), len(inf.GetStore().List())
}

// TestBigListsSyncThroughTheEndpoint: informers of Services (kube-proxy's,
// with its ServiceAccount token, and the kubelet's, with the node's
// certificate and no copy of the node's view) sync through the endpoint
// with bigListServices Services in the cluster, on their first watch
// (a streaming list, client-go's default) through the hub: the hub sends
// the initial state faster than the endpoint relays it, and the endpoint's
// bulk watch client must hold it rather than end the channel as too slow.
// A list paged as a reflector pages it without streaming lists (limit 500,
// continue) gets every Service once, from the hub.
func TestBigListsSyncThroughTheEndpoint(t *testing.T) {
	hub := startHub(t)
	kp, err := cp.ClientCA.ClientCert("system:node:node-big-lists", []string{"system:nodes"}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	n := startNodeWith(t, "node-big-lists", nodeSpec{hub: hub.URL, noView: true, kubelet: kp})
	proxy := asClient(n, proxierToken(t, "big-lists", "kube-proxy", true))
	servicesListedByHub(t, n, proxy, "")

	createServices(t, "big-lists-services", bigListServices)

	const overflows = "nodeproxy_watchmux_client_overflows_total"
	overflowsBefore := metric(t, n, overflows)
	for _, c := range []struct {
		who     string
		client  kubernetes.Interface
		watches string // the endpoint's count of c's watches the hub served
	}{
		{"kube-proxy", proxy, `nodeproxy_node_client_requests_total{path="hub",resource="services",verb="watch"}`},
		{"the kubelet", kubernetes.NewForConfigOrDie(n.kubelet), `nodeproxy_node_requests_total{path="hub",resource="services",verb="watch"}`},
	} {
		before := metricInt(t, n, c.watches)
		took, held := syncServices(t, c.who, c.client, 90*time.Second)
		if held < bigListServices {
			t.Errorf("%s's informer synced with %d Services, want at least %d", c.who, held, bigListServices)
		}
		if got := metricInt(t, n, c.watches) - before; got != 1 {
			t.Errorf("%s's informer synced after %d watches through the hub, want 1", c.who, got)
		}
		t.Logf("%s's informer synced %d Services in %s", c.who, held, took)
	}
	if got := metric(t, n, overflows); got != overflowsBefore {
		t.Errorf("the endpoint's bulk watch client closed channels as too slow: %s, %s before", got, overflowsBefore)
	}

	// A reflector without streaming lists pages its list.
	const hubLists = `nodeproxy_node_client_requests_total{path="hub",resource="services",verb="list"}`
	listsBefore := metricInt(t, n, hubLists)
	seen := map[string]bool{}
	opts := metav1.ListOptions{Limit: 500}
	pages := 0
	for {
		page, err := proxy.CoreV1().Services("").List(context.Background(), opts)
		if err != nil {
			t.Fatalf("page %d of Services: %v", pages+1, err)
		}
		pages++
		for _, svc := range page.Items {
			key := svc.Namespace + "/" + svc.Name
			if seen[key] {
				t.Fatalf("Service %s listed twice", key)
			}
			seen[key] = true
		}
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	if len(seen) < bigListServices {
		t.Errorf("the paged list held %d Services, want at least %d", len(seen), bigListServices)
	}
	if got := metricInt(t, n, hubLists) - listsBefore; got != pages {
		t.Errorf("%d of %d pages came from the hub", got, pages)
	}
}

// metricInt is metric as a number.
func metricInt(t *testing.T, n *node, series string) int {
	t.Helper()
	v, err := strconv.ParseFloat(metric(t, n, series), 64)
	if err != nil {
		t.Fatalf("%s: %v", series, err)
	}
	return int(v)
}
