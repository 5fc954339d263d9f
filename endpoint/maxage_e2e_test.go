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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestMaxConnectionAgeThroughTheEndpointLosesNothing: a hub whose
// connections end at a maximum age of 15 s (11.25 to 15 s, jittered), so
// that each is older than the hub's token cache (10 s) when it ends; the
// periodic re-check out of the way (10 minutes). kube-proxy's token lists
// Services of a namespace through a node endpoint and watches them from
// the list's resourceVersion, as its informers do, both served by the hub
// over the token's own connection, while an admin updates Service
// "ticker" every 200 ms for 50 s, its annotation counting. The endpoint's
// connections (the node's, with the kubelet's certificate, and the
// token's) end at their age at least three times each over that time.
// The watch through the endpoint stays open (kube-proxy never watches
// again), and sees every update exactly once, in order, and nothing else;
// every channel was carried to the new connection from its
// resourceVersion (the resuming client's outcomes: reopened only; the
// hub's joins: never expired); and each new connection of the token was
// authenticated afresh: a TokenReview on kube-apiserver for each. (The
// hub's count of certificate verifications is at least the node's new
// connections, but other requests add to it: it proves less.)
func TestMaxConnectionAgeThroughTheEndpointLosesNothing(t *testing.T) {
	ctx := context.Background()
	hub := startHubWith(t, testserver.Options{Args: []string{"--watch-max-connection-age=15s", "--watch-reauthenticate-interval=10m"}})
	n := startNode(t, "node-max-age", hub.URL)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	const ns = "max-age-endpoint"
	token := proxierToken(t, ns, "kube-proxy", true)
	proxy := asClient(n, token)
	if _, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "ticker", Annotations: map[string]string{"tick": "0"}},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	count := func(series string) float64 {
		v, _ := strconv.ParseFloat(metric(t, n, series), 64)
		return v
	}
	const (
		hubWatches  = `nodeproxy_node_client_requests_total{path="hub",resource="services",verb="watch"}`
		apiWatches  = `nodeproxy_node_client_requests_total{path="apiserver",resource="services",verb="watch"}`
		ageOuts     = `nodeproxy_hub_reauthentications_total{decided_by="age",result="max_age"}`
		nodeUp      = `nodeproxy_node_hub_dials_total{result="ok"}`
		certChecks  = `apiserver_client_certificate_expiration_seconds_count`
		resumedLog  = `nodeproxy_bulk_watch_resumes_total{how="log",resource="services"}`
		expiredJoin = `nodeproxy_bulk_watch_resumes_total{how="expired",resource="services"}`
	)
	outcomes := []string{"reopened", "expired", "refused", "lost_initial", "timed_out"}
	resumes := func() map[string]float64 {
		m := map[string]float64{}
		for _, o := range outcomes {
			m[o] = count(`nodeproxy_watchmux_client_resumes_total{outcome="` + o + `"}`)
		}
		return m
	}

	rv := servicesListedByHub(t, n, proxy, ns)
	watchesBefore, apiWatchesBefore := count(hubWatches), count(apiWatches)
	w, err := proxy.CoreV1().Services(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if count(hubWatches) != watchesBefore+1 {
		t.Fatal("kube-proxy's watch of Services was not served by the hub")
	}
	var (
		mu     sync.Mutex
		ticks  []int
		other  []string
		closed bool
	)
	go func() {
		for ev := range w.ResultChan() {
			mu.Lock()
			svc, _ := ev.Object.(*corev1.Service)
			switch {
			case ev.Type == watch.Bookmark:
			case ev.Type == watch.Modified && svc != nil && svc.Name == "ticker":
				i, err := strconv.Atoi(svc.Annotations["tick"])
				if err != nil {
					other = append(other, fmt.Sprintf("MODIFIED without a tick: %v", svc.Annotations))
				} else {
					ticks = append(ticks, i)
				}
			default:
				other = append(other, fmt.Sprintf("%s %v", ev.Type, ev.Object))
			}
			mu.Unlock()
		}
		mu.Lock()
		closed = true
		mu.Unlock()
	}()

	ageOuts0, nodeUp0, certChecks0, resumedLog0, expiredJoin0, resumes0 := count(ageOuts), count(nodeUp), count(certChecks), count(resumedLog), count(expiredJoin), resumes()
	scrape := func() float64 {
		m, err := controlplane.ScrapeAPIServer(ctx, admin.CoreV1().RESTClient())
		if err != nil {
			t.Fatal(err)
		}
		return m.Sum("apiserver_request_total", "resource", "tokenreviews")
	}
	reviews0 := scrape()

	const writing = 50 * time.Second
	last := 0
	for end := time.Now().Add(writing); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"tick":%q}}}`, strconv.Itoa(last+1))
		if _, err := admin.CoreV1().Services(ns).Patch(ctx, "ticker", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		last++
	}
	testserver.Eventually(t, 30*time.Second, "the last tick through the endpoint", func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if len(ticks) == 0 || ticks[len(ticks)-1] != last {
			return fmt.Errorf("%d ticks seen of %d", len(ticks), last)
		}
		return nil
	})

	aged := count(ageOuts) - ageOuts0
	nodeRedials := count(nodeUp) - nodeUp0
	reviews := scrape() - reviews0
	resumed := resumes()
	t.Logf("%d ticks; %.0f connections ended at their maximum age; the node's connection up again %.0f times; %.0f TokenReviews on kube-apiserver, %.0f certificate verifications on the hub; resumes %v -> %v",
		last, aged, nodeRedials, reviews, count(certChecks)-certChecks0, resumes0, resumed)
	mu.Lock()
	for i, tick := range ticks {
		if tick != i+1 {
			t.Errorf("kube-proxy's watch saw ticks %v, want 1..%d once each, in order", ticks, last)
			break
		}
	}
	if len(other) > 0 {
		t.Errorf("kube-proxy's watch got events other than the ticks: %v", other)
	}
	if closed {
		t.Error("kube-proxy's watch through the endpoint ended")
	}
	mu.Unlock()
	if got := count(hubWatches) - watchesBefore; got != 1 {
		t.Errorf("kube-proxy's watches of Services on the hub: %.0f, want the one, never watched again", got)
	}
	if got := count(apiWatches) - apiWatchesBefore; got != 0 {
		t.Errorf("%.0f watches of Services went to kube-apiserver", got)
	}
	// The node's connection and the token's, each at least three times.
	if aged < 6 || nodeRedials < 3 {
		t.Errorf("%.0f age-outs, %.0f of the node's connection, over %s: want at least 3 of each connection", aged, nodeRedials, writing)
	}
	tokenAgeOuts := aged - nodeRedials
	if reviews < tokenAgeOuts {
		t.Errorf("%.0f TokenReviews on kube-apiserver for %.0f new connections of the token: one resumed without being authenticated afresh", reviews, tokenAgeOuts)
	}
	if got := count(certChecks) - certChecks0; got < nodeRedials {
		t.Errorf("%.0f certificate verifications on the hub for %.0f new connections of the node", got, nodeRedials)
	}
	if got := resumed["reopened"] - resumes0["reopened"]; got < tokenAgeOuts {
		t.Errorf("%.0f channels reopened from their resourceVersion for %.0f age-outs of the token's connection", got, tokenAgeOuts)
	}
	for _, o := range outcomes[1:] {
		if got := resumed[o] - resumes0[o]; got != 0 {
			t.Errorf("%.0f resumes %s, want every channel reopened from its resourceVersion", got, o)
		}
	}
	if got := count(resumedLog) - resumedLog0; got < tokenAgeOuts {
		t.Errorf("%.0f Services channels joined the hub's change log for %.0f age-outs of the token's connection", got, tokenAgeOuts)
	}
	if got := count(expiredJoin) - expiredJoin0; got != 0 {
		t.Errorf("%.0f Services channels resumed with ERROR 410 on the hub", got)
	}
}
