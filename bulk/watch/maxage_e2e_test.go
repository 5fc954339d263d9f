package watch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// ageTestMaxAge is the hub's --watch-max-connection-age in these tests:
// longer than the hub's token cache (10 s) even after the jitter takes up
// to a quarter off, so that every new connection's token is reviewed by
// kube-apiserver again rather than found in the cache.
const ageTestMaxAge = 15 * time.Second

// startAgingHub starts the hub on npPort with a short maximum connection
// age and the periodic re-check out of the way (10 minutes), registered
// behind kube-apiserver's aggregator, and a namespace with kube-proxy's
// ServiceAccount and roles (startKubeProxyHub).
func startAgingHub(t *testing.T, prefix string, maxAge time.Duration) (*testserver.Server, kubernetes.Interface, string) {
	t.Helper()
	srv, admin, ns := startKubeProxyHub(t, prefix, "--watch-max-connection-age="+maxAge.String(), "--watch-max-aggregated-connection-age="+maxAge.String(), "--watch-reauthenticate-interval=10m")
	if err := cp.RegisterAPIService(context.Background(), testserver.Manifest(t, "apiservice.yaml"), npPort); err != nil {
		t.Fatal(err)
	}
	return srv, admin, ns
}

// tick is the annotation the writer counts in.
const tick = "nodeproxy.test/tick"

// ticksOf is a session channel's events on Service "ticker" as its
// tick annotations, in the order they came, with every event that is
// not a MODIFIED of it (an ERROR, a second ADDED: the channel opened
// whole again) as an error.
type ticksOf struct {
	mu     sync.Mutex
	ticks  []int
	errs   []string
	closed bool
}

func (r *ticksOf) read(ch *watchmux.SessionChannel) {
	for ev := range ch.Events {
		var svc corev1.Service
		if ev.Type != watch.Bookmark && ev.Type != watch.Error {
			if err := json.Unmarshal(ev.Object, &svc); err != nil {
				r.add(-1, fmt.Sprintf("%s: %v", ev.Type, err))
				continue
			}
		}
		switch {
		case ev.Type == watch.Bookmark:
		case ev.Type == watch.Modified && svc.Name == "ticker":
			n, err := strconv.Atoi(svc.Annotations[tick])
			if err != nil {
				r.add(-1, fmt.Sprintf("MODIFIED without a tick: %v", svc.Annotations))
				continue
			}
			r.add(n, "")
		default:
			r.add(-1, fmt.Sprintf("%s %s %+v", ev.Type, svc.Name, ev.Status))
		}
	}
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
}

func (r *ticksOf) add(n int, err string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != "" {
		r.errs = append(r.errs, err)
		return
	}
	r.ticks = append(r.ticks, n)
}

func (r *ticksOf) last() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ticks) == 0 {
		return 0
	}
	return r.ticks[len(r.ticks)-1]
}

// check fails t unless the ticks are first+1..last exactly, once each, in
// order, with nothing else.
func (r *ticksOf) check(t *testing.T, who string, first, last int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) > 0 {
		t.Errorf("%s: events other than the ticks' MODIFIED: %v", who, r.errs)
	}
	if r.closed {
		t.Errorf("%s: the channel's events ended", who)
	}
	want := first + 1
	for i, n := range r.ticks {
		if n != want {
			t.Errorf("%s: event %d is tick %d, want %d (ticks seen: %v)", who, i, n, want, r.ticks)
			return
		}
		want++
	}
	if want-1 != last {
		t.Errorf("%s: saw ticks up to %d, want up to %d", who, want-1, last)
	}
}

// resumes counts a session's connections and its channels' resume
// outcomes (watchmux.Resume): the resume path's own counters.
type resumes struct {
	mu       sync.Mutex
	dials    int
	outcomes map[string]int
}

// options are a new session's: what an earlier one counted is
// forgotten.
func (r *resumes) options() []watchmux.SessionOption {
	r.mu.Lock()
	r.dials, r.outcomes = 0, map[string]int{}
	r.mu.Unlock()
	return []watchmux.SessionOption{
		watchmux.WithConnectionObserver(func(up bool) {
			if up {
				r.mu.Lock()
				r.dials++
				r.mu.Unlock()
			}
		}),
		watchmux.WithResumeObserver(func(res watchmux.Resume) {
			r.mu.Lock()
			r.outcomes[res.Outcome]++
			r.mu.Unlock()
		}),
	}
}

func (r *resumes) get() (int, map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.outcomes {
		out[k] = v
	}
	return r.dials, out
}

// TestMaxConnectionAgeResumesWithNothingLostOrRepeated: a hub whose
// connections end at a maximum age of 15 s (11.25 to 15 s, jittered).
// Two resuming clients (watchmux.Session) watch the Services of a
// namespace with tokens of kube-proxy's ServiceAccount: one directly on
// the hub, one through kube-apiserver's aggregator. A writer updates
// Service "ticker" every 200 ms, its annotation counting, for 50 s: at
// least three age-outs of each client's connection. Each client sees
// every tick exactly once, in order, as MODIFIED, and nothing else (no
// ERROR, no ADDED: the channel is never opened whole again); each
// age-out (counted by the hub) is a new connection on which every
// channel was reopened from its resourceVersion (the resume path's
// outcomes: reopened, never expired, refused, lost_initial or
// timed_out; the hub's joins from its change log, never expired); and
// each new direct connection was authenticated afresh by the hub's token
// authenticator (a TokenReview on kube-apiserver, or the hub's cache of
// one, which keeps a review 10 s, less than the age), while each
// aggregated one is a new request that kube-apiserver authenticates
// itself.
func TestMaxConnectionAgeResumesWithNothingLostOrRepeated(t *testing.T) {
	srv, admin, ns := startAgingHub(t, "max-age", ageTestMaxAge)
	ctx := context.Background()
	if _, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "ticker", Annotations: map[string]string{tick: "0"}},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sel := v1alpha1.GetOperation{Resource: metav1.GroupVersionResource{Version: "v1", Resource: "services"}, Namespace: ns,
		Options: metav1.ListOptions{AllowWatchBookmarks: true}}
	servicesOf := func(c *rest.Config) bool {
		cc := kubernetes.NewForConfigOrDie(c)
		_, err := cc.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		return err == nil
	}
	// A client whose session starts from the ticker's current state: its
	// channel from the list's resourceVersion, as a reflector watches.
	type client struct {
		name    string
		cfg     *rest.Config
		session *watchmux.Session
		res     resumes
		ticks   ticksOf
	}
	direct := &client{name: "direct", cfg: serviceAccountConfig(t, admin, srv, ns, "kube-proxy")}
	aggregated := &client{name: "through the aggregator", cfg: serviceAccountConfig(t, admin, srv, ns, "kube-proxy")}
	aggregated.cfg.Host, aggregated.cfg.CAFile = cp.URL, cp.ServingCA.CertPath
	testserver.Eventually(t, 30*time.Second, "kube-proxy's account allowed to list Services", func(context.Context) error {
		if !servicesOf(aggregated.cfg) {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	list, err := admin.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sel.Options.ResourceVersion = list.ResourceVersion
	for _, c := range []*client{direct, aggregated} {
		// The session lives as long as the context it is made with: the
		// test's, not the poll's.
		testserver.Eventually(t, 30*time.Second, c.name+": the channel allowed", func(context.Context) error {
			s, err := watchmux.NewSession(ctx, c.cfg, c.res.options()...)
			if err != nil {
				return err
			}
			ch, err := s.Watch(ctx, sel)
			if err != nil {
				_ = s.Close()
				return err
			}
			c.session = s
			go c.ticks.read(ch)
			return nil
		})
		t.Cleanup(func() { _ = c.session.Close() })
	}

	ageOuts0 := testserver.Gathered(t, "nodeproxy_hub_reauthentications_total", map[string]string{"result": "max_age"})
	expired0 := testserver.Gathered(t, "nodeproxy_bulk_watch_resumes_total", map[string]string{"how": "expired"})
	fromLog0 := testserver.Gathered(t, "nodeproxy_bulk_watch_resumes_total", map[string]string{"resource": "services", "how": "log"})
	scrape := func() float64 {
		m, err := controlplane.ScrapeAPIServer(ctx, admin.CoreV1().RESTClient())
		if err != nil {
			t.Fatal(err)
		}
		return m.Sum("apiserver_request_total", "resource", "tokenreviews")
	}
	reviews0 := scrape()
	tokenAuths := func() float64 {
		return testserver.Gathered(t, "authentication_token_cache_request_total", map[string]string{})
	}
	tokenAuths0 := tokenAuths()
	dials0 := map[*client]int{}
	for _, c := range []*client{direct, aggregated} {
		dials0[c], _ = c.res.get()
	}

	// The writer: a tick every 200 ms for 50 s.
	const writing = 50 * time.Second
	last := 0
	for end := time.Now().Add(writing); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, tick, strconv.Itoa(last+1))
		if _, err := admin.CoreV1().Services(ns).Patch(ctx, "ticker", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		last++
	}
	for _, c := range []*client{direct, aggregated} {
		testserver.Eventually(t, 30*time.Second, c.name+": the last tick", func(context.Context) error {
			if got := c.ticks.last(); got != last {
				c.ticks.mu.Lock()
				defer c.ticks.mu.Unlock()
				return fmt.Errorf("at tick %d of %d (other events: %v)", got, last, c.ticks.errs)
			}
			return nil
		})
	}

	ageOuts := testserver.Gathered(t, "nodeproxy_hub_reauthentications_total", map[string]string{"result": "max_age"}) - ageOuts0
	reviews := scrape() - reviews0
	t.Logf("%d ticks; %.0f connections ended at their maximum age; %.0f TokenReviews on kube-apiserver", last, ageOuts, reviews)
	for _, c := range []*client{direct, aggregated} {
		c.ticks.check(t, c.name, 0, last)
		dials, outcomes := c.res.get()
		redials := dials - dials0[c]
		t.Logf("%s: %d new connections; resumes %v", c.name, redials, outcomes)
		if redials < 3 {
			t.Errorf("%s: %d new connections over %s, want at least 3 age-outs", c.name, redials, writing)
		}
		if outcomes[watchmux.ResumeReopened] != dials-1 || len(outcomes) != 1 {
			t.Errorf("%s: resume outcomes %v over %d new connections, want each reopened from its resourceVersion and nothing else", c.name, outcomes, dials-1)
		}
	}
	directRedials := 0
	if d, _ := direct.res.get(); d > 0 {
		directRedials = d - dials0[direct]
	}
	// Each new direct connection went through the hub's token
	// authenticator: a TokenReview, or its cache of one at most 10 s old
	// (a connection the session made again within 10 s of the one before,
	// its keepalive late under load, is one), never an authentication
	// carried over from the connection before.
	if auths := tokenAuths() - tokenAuths0; auths < float64(directRedials) || reviews < 1 {
		t.Errorf("%.0f token authentications by the hub (%.0f TokenReviews on kube-apiserver) for %d new direct connections: a connection resumed without being authenticated afresh",
			auths, reviews, directRedials)
	}
	if got := testserver.Gathered(t, "nodeproxy_bulk_watch_resumes_total", map[string]string{"how": "expired"}) - expired0; got != 0 {
		t.Errorf("%.0f channels resumed with ERROR 410 on the hub", got)
	}
	if got := testserver.Gathered(t, "nodeproxy_bulk_watch_resumes_total", map[string]string{"resource": "services", "how": "log"}) - fromLog0; got < ageOuts {
		t.Errorf("%.0f channels joined the change log on the hub for %.0f age-outs", got, ageOuts)
	}
}

// TestRevokedTokenLosesItsAggregatedChannelsAtTheNextAgeOut: a token of
// kube-proxy's ServiceAccount, bound to a Secret, watches Services
// through kube-apiserver's aggregator, in a resuming session that ends
// once its credential is refused. The hub knows such a caller only by the
// front proxy's certificate, so it cannot re-check the token itself:
// kube-apiserver checks it at each new connection, which the maximum age
// (30 s here, 22.5 to 30 s jittered) forces. The Secret is deleted right
// after the connection opens: kube-apiserver refuses the token within its
// 10 s cache, before the age-out. The session must end with
// kube-apiserver's 401 at the connection's first age-out: not before its
// earliest (three quarters of the age) nor before kube-apiserver refuses
// the token, and no later than the age plus the redial's few seconds.
func TestRevokedTokenLosesItsAggregatedChannelsAtTheNextAgeOut(t *testing.T) {
	const maxAge = 30 * time.Second
	_, admin, ns := startAgingHub(t, "agg-revoked", maxAge)
	ctx := context.Background()
	token, holder, err := cp.SecretBoundToken(ctx, ns, "kube-proxy", "token-holder")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: cp.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: cp.ServingCA.CertPath}}
	ended := make(chan error, 1)
	sel := v1alpha1.GetOperation{Resource: metav1.GroupVersionResource{Version: "v1", Resource: "services"}, Namespace: ns,
		Options: metav1.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true}}
	var (
		s      *watchmux.Session
		ch     *watchmux.SessionChannel
		opened time.Time
	)
	testserver.Eventually(t, 30*time.Second, "the channel through the aggregator", func(context.Context) error {
		var err error
		opened = time.Now()
		s, err = watchmux.NewSession(ctx, cfg, watchmux.WithEndOnUnauthorized(func(err error) { ended <- err }))
		if err != nil {
			return err
		}
		if ch, err = s.Watch(ctx, sel); err != nil {
			_ = s.Close()
			return err
		}
		return nil
	})
	defer s.Close()

	if err := admin.CoreV1().Secrets(ns).Delete(ctx, holder.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	direct := kubernetes.NewForConfigOrDie(cfg)
	testserver.Eventually(t, 20*time.Second, "kube-apiserver refusing the token", func(ctx context.Context) error {
		if _, err := direct.CoreV1().Services(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
			return fmt.Errorf("kube-apiserver answers the token: %v", err)
		}
		return nil
	})
	refused := time.Now()
	if refused.Sub(opened) >= maxAge*3/4 {
		t.Fatalf("kube-apiserver refused the token %s after the connection opened, past its earliest age-out: nothing tested", refused.Sub(opened).Round(time.Second))
	}

	// The age-out, then a redial through kube-apiserver, refused.
	const redial = 5 * time.Second
	select {
	case err := <-ended:
		at := time.Now()
		if !apierrors.IsUnauthorized(err) {
			t.Fatalf("the session ended with %v, want kube-apiserver's 401", err)
		}
		var st apierrors.APIStatus
		if !errors.As(err, &st) || st.Status().Code != http.StatusUnauthorized || st.Status().Message != "Unauthorized" {
			t.Errorf("the session ended with %v, want kube-apiserver's 401 Unauthorized", err)
		}
		if at.Before(refused) || at.Sub(opened) < maxAge*3/4 {
			t.Errorf("the session ended %s after its connection opened, before kube-apiserver refused the token (%s) or before its earliest age-out (%s)",
				at.Sub(opened).Round(time.Millisecond), refused.Sub(opened).Round(time.Millisecond), maxAge*3/4)
		}
		t.Logf("the aggregated session ended with kube-apiserver's 401 %s after its connection opened (%s after the Secret's deletion; kube-apiserver refused the token after %s)",
			at.Sub(opened).Round(time.Millisecond), at.Sub(deleted).Round(time.Millisecond), refused.Sub(deleted).Round(time.Millisecond))
	case <-time.After(time.Until(opened.Add(maxAge + redial))):
		t.Fatalf("the aggregated session is still up %s after its connection opened, past its maximum age (%s) and a redial", time.Since(opened).Round(time.Second), maxAge)
	}
	// Its events (the initial state's, none since) end with it.
	timeout := time.After(10 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-ch.Events:
		case <-timeout:
			t.Fatal("the channel's events did not end with the session")
		}
	}
}
