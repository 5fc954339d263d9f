package bench

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// restartResult is what a restart of kube-apiserver cost it, and how long
// the proxies were blind.
type restartResult struct {
	// readyTook is from the restart's start (kube-apiserver stopped) to
	// its /readyz answering ok.
	readyTook time.Duration
	// requests are what kube-apiserver served in the window after it was
	// ready (requestsServed): the nodes' relists, the hub's, and
	// everything else, the bench's one create included.
	requests requestCounts
	// steady are what kube-apiserver served in a window as long just
	// before, with the nodes running and no restart (one create too): the
	// steady state (lease renewals, status updates, reviews) the restart's
	// window holds as well.
	steady requestCounts
	// byFlowSchema and steadyByFlowSchema are the same windows' requests
	// by API Priority and Fairness flow schema: who asked (system-nodes:
	// the kubelets; service-accounts: the proxies; global-default: the
	// hub and the bench), which apiserver_request_total does not say.
	byFlowSchema, steadyByFlowSchema requestCounts
	// arrivals are, for every proxy, from just before the first change
	// after ready (a new EndpointSlice) to the proxy's log line for it,
	// read by the bench.
	arrivals []time.Duration
}

// restartAPIServer restarts kube-apiserver with the nodes running, makes
// a change as soon as it is ready, counts what it serves in the window
// after and times the change's arrival at every proxy. It returns once
// the hub's watches are back, for what runs next.
func (s *proxyRun) restartAPIServer(ctx context.Context, hubOwn controlplane.LongRunningRequests) (r restartResult, err error) {
	l := s.env.Proxies
	s.env.progressf("proxies (%s): counting kube-apiserver's requests for %s with no restart", s.way, l.RestartWindow)
	if r.steady, r.steadyByFlowSchema, err = s.steadyRequests(ctx); err != nil {
		return r, err
	}
	s.env.progressf("proxies (%s): restarting kube-apiserver under the nodes, counting its requests for %s", s.way, l.RestartWindow)
	began := time.Now()
	if err := s.t.Local.ControlPlane.RestartAPIServer(ctx); err != nil {
		return r, err
	}
	ready := time.Now()
	r.readyTook = ready.Sub(began)
	// The admin client's connection died with the old process; the first
	// request after may fail while it dials again.
	var before Metrics
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		before, err = ScrapeAPIServer(ctx, s.admin.CoreV1().RESTClient())
		return err == nil, nil
	}); err != nil {
		return r, fmt.Errorf("scrape kube-apiserver once ready: %w", err)
	}

	proxies := s.proxies()
	marks := controlplane.MarkHollowProxies(proxies)
	name := "after-restart"
	probes := map[string]time.Time{s.ns + "/" + name: time.Now()}
	if err := s.createSlice(ctx, name, map[string]string{probeLabel: "true"}, "10.255.0.2"); err != nil {
		return r, err
	}
	seen := make(chan error, 1)
	go func() {
		seen <- controlplane.WaitHollowProxies(ctx, proxies, "the first change after kube-apiserver's restart", sawProbes(marks, probes))
	}()
	if err := sleepUntil(ctx, ready.Add(l.RestartWindow)); err != nil {
		<-seen
		return r, err
	}
	after, err := ScrapeAPIServer(ctx, s.admin.CoreV1().RESTClient())
	if err != nil {
		<-seen
		return r, err
	}
	r.requests, r.byFlowSchema = requestsServed(before, after), dispatchedByFlowSchema(after).minus(dispatchedByFlowSchema(before))
	if err := <-seen; err != nil {
		return r, err
	}
	r.arrivals = probeLatencies(proxies, marks, probes)
	s.env.progressf("proxies (%s): %.0f requests in the %s after ready (%.0f lists and watches), %.0f with no restart (%.0f); every proxy saw the next change %.2fs after it was made",
		s.way, r.requests.total(), l.RestartWindow, r.requests.reads(), r.steady.total(), r.steady.reads(), maxDuration(r.arrivals).Seconds())
	return r, waitWatchesBack(ctx, s.admin, hubOwn)
}

// steadyRequests counts what kube-apiserver serves in a restart window
// with no restart, the same create in it as after a restart: the
// baseline a restart's window is read against.
func (s *proxyRun) steadyRequests(ctx context.Context) (requestCounts, requestCounts, error) {
	before, err := ScrapeAPIServer(ctx, s.admin.CoreV1().RESTClient())
	if err != nil {
		return nil, nil, err
	}
	began := time.Now()
	if err := s.createSlice(ctx, "steady", map[string]string{probeLabel: "true"}, "10.255.0.3"); err != nil {
		return nil, nil, err
	}
	if err := sleepUntil(ctx, began.Add(s.env.Proxies.RestartWindow)); err != nil {
		return nil, nil, err
	}
	after, err := ScrapeAPIServer(ctx, s.admin.CoreV1().RESTClient())
	if err != nil {
		return nil, nil, err
	}
	return requestsServed(before, after), dispatchedByFlowSchema(after).minus(dispatchedByFlowSchema(before)), nil
}

// requestsServed are the requests kube-apiserver served between two
// scrapes: apiserver_request_total counts a request when it ends, so a
// watch still open at the second scrape is counted from
// apiserver_longrunning_requests instead, as the open ones grew.
func requestsServed(before, after Metrics) requestCounts {
	out := requestsIn(after).minus(requestsIn(before))
	for k, n := range controlplane.LongRunningIn(after).Minus(controlplane.LongRunningIn(before)).ByVerbResource() {
		if n > 0 {
			out[k] += float64(n)
		}
	}
	return out
}

func maxDuration(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}
