package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// churnRound is one churn round of a side.
type churnRound struct {
	// watched rounds change the slices the proxies watch.
	watched bool
	// apiCPU, hubCPU and endpointsCPU (all endpoints together) are over
	// the round's writes, from the first tick to the end of the last
	// interval.
	apiCPU, hubCPU, endpointsCPU time.Duration
	// apiRunWait is how long kube-apiserver's threads waited, runnable,
	// for a CPU over the round, apiPreempted how often another thread
	// took a CPU from them, and machineCPU the CPU every process on the
	// machine used: how contended the round was.
	apiRunWait, machineCPU time.Duration
	apiPreempted           int64
	// apiRSSPeak is kube-apiserver's highest resident memory sampled
	// during the round.
	apiRSSPeak int64
	// latencies are, for every probe and proxy, from just before the
	// probe's create to the moment the bench read the proxy's log line
	// for its add.
	latencies []time.Duration
	// overran counts the ticks whose writes took longer than the
	// interval: the churn then ran slower than asked.
	overran int
	// requests are what kube-apiserver served over the round
	// (requestsServed), whoever asked.
	requests requestCounts
	// sliceEvents are the EndpointSlice events kube-apiserver sent its
	// watchers over the round (apiserver_watch_events_total), one per
	// event and watcher: the delivery's work as a count, which a busy
	// machine does not blur as it does CPU time.
	sliceEvents float64
	// sliceRetries are the EndpointSlice updates kube-apiserver sent etcd
	// beyond one a patch or update (etcd_requests_total's updates less
	// the round's PATCH and PUT of them; a create is etcd's "create"): a
	// write is tried again when the watch cache's copy it starts from is
	// stale, and then does its work twice.
	sliceRetries float64
	// closedWatches are the EndpointSlice watches kube-apiserver closed
	// for not keeping up over the round (apiserver_terminated_watchers_total):
	// their clients list and watch again.
	closedWatches float64
	// apiParts is kube-apiserver's CPU over the round by part of its CPU
	// profile (cpuByPart with apiCPUParts): what it spent the CPU on,
	// which its CPU time alone does not say.
	apiParts map[string]time.Duration
}

// probeLabel marks the probes, the EndpointSlices created one a tick to
// time the churn's arrival at the proxies: an add is the one event a
// hollow proxy logs by name (see controlplane.ProxyLog).
const probeLabel = "bench.nodeproxy.io/probe"

// churnWriters is how many writes of a tick are in flight at once:
// enough for 50 small patches to fit a second on a loaded kube-apiserver,
// few enough that the bench's own client stays out of the way.
const churnWriters = 8

// churn runs churn round k: every interval, one new probe and a change of
// every slice of the round's set.
func (s *proxyRun) churn(ctx context.Context, k int, watched bool) (r churnRound, err error) {
	l := s.env.Proxies
	r.watched = watched
	names, kind := s.unwatched, "unwatched"
	if watched {
		names, kind = s.watched, "watched"
	}
	s.env.progressf("proxies (%s): churn round %d, %d %s EndpointSlices every %s for %s", s.way, k, len(names), kind, l.Interval, l.Churn)
	proxies := s.proxies()
	marks := controlplane.MarkHollowProxies(proxies)
	apiStart, hubStart, err := serverUsage(s.t)
	if err != nil {
		return r, err
	}
	endpointsStart, err := endpointUsage(s.nodes)
	if err != nil {
		return r, err
	}
	machineStart, err := machineBusy()
	if err != nil {
		return r, err
	}
	before, err := ScrapeAPIServer(ctx, s.admin.CoreV1().RESTClient())
	if err != nil {
		return r, err
	}
	stopSampling, peak := s.sampleRSS(ctx)
	profiled := s.profileRound(ctx, fmt.Sprintf("%s-round%d-%s", s.way, k, kind))
	probes := map[string]time.Time{}
	began := time.Now()
	for i := range int(l.Churn / l.Interval) {
		tick := began.Add(time.Duration(i) * l.Interval)
		if err := sleepUntil(ctx, tick); err != nil {
			stopSampling()
			return r, err
		}
		name := fmt.Sprintf("probe-%d-%d", k, i)
		probes[s.ns+"/"+name] = time.Now()
		if err := s.createSlice(ctx, name, map[string]string{probeLabel: "true"}, "10.255.0.1"); err != nil {
			stopSampling()
			return r, err
		}
		if err := s.changeSlices(ctx, names); err != nil {
			stopSampling()
			return r, err
		}
		if time.Since(tick) > l.Interval {
			r.overran++
		}
	}
	if err := sleepUntil(ctx, began.Add(l.Churn)); err != nil {
		stopSampling()
		return r, err
	}
	apiEnd, hubEnd, err := serverUsage(s.t)
	stopSampling()
	if err != nil {
		return r, err
	}
	machineEnd, err := machineBusy()
	if err != nil {
		return r, err
	}
	r.apiRunWait, r.machineCPU = apiEnd.RunWait-apiStart.RunWait, machineEnd-machineStart
	r.apiPreempted = apiEnd.Preempted - apiStart.Preempted
	after, err := ScrapeAPIServer(ctx, s.admin.CoreV1().RESTClient())
	if err != nil {
		return r, err
	}
	r.requests = requestsServed(before, after)
	r.sliceEvents = sliceEvents(after) - sliceEvents(before)
	r.closedWatches = after.Sum("apiserver_terminated_watchers_total", "group", "discovery.k8s.io", "resource", "endpointslices") -
		before.Sum("apiserver_terminated_watchers_total", "group", "discovery.k8s.io", "resource", "endpointslices")
	r.sliceRetries = sliceUpdates(after) - sliceUpdates(before) - r.requests["PATCH endpointslices"] - r.requests["PUT endpointslices"]
	if r.apiParts, err = profiled(); err != nil {
		return r, err
	}
	endpointsEnd, err := endpointUsage(s.nodes)
	if err != nil {
		return r, err
	}
	r.apiCPU, r.hubCPU, r.apiRSSPeak = apiEnd.CPU-apiStart.CPU, hubEnd.CPU-hubStart.CPU, <-peak
	for i, u := range endpointsEnd {
		r.endpointsCPU += u.CPU - endpointsStart[i].CPU
	}

	if err := controlplane.WaitHollowProxies(ctx, proxies, fmt.Sprintf("round %d's %d probes", k, len(probes)), sawProbes(marks, probes)); err != nil {
		return r, err
	}
	if watched {
		r.latencies = probeLatencies(proxies, marks, probes)
	}
	// The probes go, and every proxy hears they went, before the next
	// round starts.
	if err := s.admin.DiscoveryV1().EndpointSlices(s.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: probeLabel}); err != nil {
		return r, fmt.Errorf("delete the probes: %w", err)
	}
	if err := s.t.Local.ControlPlane.WaitHollowProxiesCaughtUp(ctx, proxies, s.ns); err != nil {
		return r, err
	}
	s.env.progressf("proxies (%s): churn round %d done: kube-apiserver CPU %.2fs (%.2fs watch delivery and HTTP/2, by its profile), %.2fs waiting for a CPU, preempted %d times; hub CPU %.2fs, machine CPU %.0fs, kube-apiserver RSS peak %d MiB, %d ticks overran",
		s.way, k, r.apiCPU.Seconds(), (r.apiParts[watchDelivery.name] + r.apiParts[httpServing.name]).Seconds(), r.apiRunWait.Seconds(), r.apiPreempted,
		r.hubCPU.Seconds(), r.machineCPU.Seconds(), r.apiRSSPeak>>20, r.overran)
	return r, nil
}

// profileRound takes kube-apiserver's CPU profile for a churn round from
// now, in the background; wait returns it by part (cpuByPart), once the
// round is over, and when the scenario keeps profiles writes them to its
// directory as name.N.pprof.
func (s *proxyRun) profileRound(ctx context.Context, name string) (wait func() (map[string]time.Duration, error)) {
	type result struct {
		parts map[string]time.Duration
		err   error
	}
	done := make(chan result, 1)
	go func() {
		p, raw, err := profileAPIServer(ctx, s.admin.CoreV1().RESTClient(), s.env.Proxies.Churn)
		if err == nil && s.env.Proxies.Profiles != "" {
			err = writeProfiles(s.env.Proxies.Profiles, name, raw)
		}
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{parts: cpuByPart(p, apiCPUParts)}
	}()
	return func() (map[string]time.Duration, error) {
		r := <-done
		return r.parts, r.err
	}
}

// sliceEvents is kube-apiserver's count of EndpointSlice events sent to
// watchers so far.
func sliceEvents(m Metrics) float64 {
	return m.Sum("apiserver_watch_events_total", "group", "discovery.k8s.io", "resource", "endpointslices")
}

// sliceUpdates is kube-apiserver's count of EndpointSlice updates sent
// to etcd so far (a create is a "create", not counted here).
func sliceUpdates(m Metrics) float64 {
	return m.Sum("etcd_requests_total", "operation", "update", "group", "discovery.k8s.io", "resource", "endpointslices")
}

// changeSlices gives every slice of names a new address, churnWriters
// at a time.
func (s *proxyRun) changeSlices(ctx context.Context, names []string) error {
	s.generation++
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(churnWriters)
	for i, name := range names {
		// A merge patch replaces the list of endpoints whole: one write,
		// no read before it.
		patch := fmt.Appendf(nil, `{"endpoints":[{"addresses":[%q]}]}`, s.address(i))
		g.Go(func() error {
			if _, err := s.admin.DiscoveryV1().EndpointSlices(s.ns).Patch(gctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("change endpointslice %s: %w", name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// sampleRSS reads kube-apiserver's resident memory every second until
// stop is called; peak then yields the highest reading.
func (s *proxyRun) sampleRSS(ctx context.Context) (stop func(), peak <-chan int64) {
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan int64, 1)
	var once sync.Once
	go func() {
		var highest int64
		ticker := time.NewTicker(time.Second)
		defer ticker.Stop()
		for {
			if u, err := s.t.APIServer.Usage(); err == nil {
				highest = max(highest, u.RSS)
			}
			select {
			case <-ticker.C:
			case <-ctx.Done():
				out <- highest
				return
			}
		}
	}()
	return func() { once.Do(cancel) }, out
}

// sawProbes is a check for controlplane.WaitHollowProxies: the proxy
// logged the add of every probe since its mark.
func sawProbes(marks controlplane.ProxyMarks, probes map[string]time.Time) func(*controlplane.HollowProxy) error {
	return func(p *controlplane.HollowProxy) error {
		seen := map[string]bool{}
		for _, e := range p.Log.Since(marks[p]) {
			if _, ok := probes[e.Object]; ok && e.Kind == controlplane.ProxyEndpointSlice && e.Type == controlplane.ProxyAdded {
				seen[e.Object] = true
			}
		}
		if len(seen) < len(probes) {
			return fmt.Errorf("%d of %d probes added", len(seen), len(probes))
		}
		return nil
	}
}

// probeLatencies are, for every proxy and probe, from the probe's create
// to the first add of it the proxy logged after its mark.
func probeLatencies(proxies []*controlplane.HollowProxy, marks controlplane.ProxyMarks, probes map[string]time.Time) []time.Duration {
	var out []time.Duration
	for _, p := range proxies {
		seen := map[string]bool{}
		for _, e := range p.Log.Since(marks[p]) {
			created, ok := probes[e.Object]
			if !ok || seen[e.Object] || e.Kind != controlplane.ProxyEndpointSlice || e.Type != controlplane.ProxyAdded {
				continue
			}
			seen[e.Object] = true
			out = append(out, e.At.Sub(created))
		}
	}
	return out
}

// churnCost is what the churn cost on a side: medians over the pairs of
// rounds, and the watched round's cost less the unwatched one's.
type churnCost struct {
	watchedCPU, unwatchedCPU time.Duration
	// cpu is the median over pairs of the watched round's CPU less the
	// unwatched one's: delivering the changes to the nodes. cpuLow and
	// cpuHigh are the pairs' spread.
	cpu, cpuLow, cpuHigh  time.Duration
	hubWatchedCPU, hubCPU time.Duration
	endpointsCPU          time.Duration
	rssPeak               int64
	// requests are the median difference, by verb and resource, of what
	// kube-apiserver served in the watched round less the unwatched one:
	// where its CPU for the delivery goes.
	requests requestCounts
	// watchedEvents and unwatchedEvents are the median EndpointSlice
	// events kube-apiserver sent a round of each kind.
	watchedEvents, unwatchedEvents float64
	// watchedRetries and unwatchedRetries are the median sliceRetries a
	// round of each kind.
	watchedRetries, unwatchedRetries float64
	// watchedClosed is the median closedWatches of the watched rounds.
	watchedClosed float64
	// watchedParts, unwatchedParts and partsDiff are kube-apiserver's
	// CPU by part of its profile (apiCPUParts): the medians over pairs of
	// the watched round's, the unwatched round's and of their difference.
	watchedParts, unwatchedParts, partsDiff map[string]time.Duration
	// watchedRunWait, unwatchedRunWait, watchedMachine,
	// unwatchedMachine, watchedPreempted and unwatchedPreempted are the
	// medians of the rounds' apiRunWait, machineCPU and apiPreempted.
	watchedRunWait, unwatchedRunWait, watchedMachine, unwatchedMachine time.Duration
	watchedPreempted, unwatchedPreempted                               float64
	// watchedShare and unwatchedShare are the medians of the rounds'
	// share of kube-apiserver's profiled CPU that is watch delivery and
	// HTTP/2 (deliveryShare); shareCPU the median over pairs of the
	// watched round's share less the unwatched one's, times the unwatched
	// round's profiled CPU: delivering the churn to the nodes at the
	// unwatched round's contention.
	watchedShare, unwatchedShare float64
	shareCPU                     time.Duration
}

// deliveryShare is the share of a round's profiled CPU that is watch
// delivery and HTTP/2 (watchDelivery and httpServing): unlike their CPU
// time, a share stays put when the machine's contention inflates all of
// kube-apiserver's work alike.
func deliveryShare(parts map[string]time.Duration) float64 {
	if parts["total"] <= 0 {
		return 0
	}
	return float64(parts[watchDelivery.name]+parts[httpServing.name]) / float64(parts["total"])
}

func (s proxySide) churnCost() churnCost {
	var c churnCost
	var watched, unwatched, diff, hubWatched, hubDiff, endpoints []time.Duration
	var requests [][2]requestCounts
	var watchedEvents, unwatchedEvents, watchedRetries, unwatchedRetries, watchedPreempted, unwatchedPreempted, watchedClosed []float64
	var watchedParts, unwatchedParts, partsDiff []map[string]time.Duration
	var watchedRunWait, unwatchedRunWait, watchedMachine, unwatchedMachine, shareCPU []time.Duration
	var watchedShare, unwatchedShare []float64
	for i := 0; i+1 < len(s.rounds); i += 2 {
		w, u := s.rounds[i], s.rounds[i+1]
		if !w.watched {
			w, u = u, w
		}
		watched, unwatched = append(watched, w.apiCPU), append(unwatched, u.apiCPU)
		diff = append(diff, w.apiCPU-u.apiCPU)
		hubWatched, hubDiff = append(hubWatched, w.hubCPU), append(hubDiff, w.hubCPU-u.hubCPU)
		endpoints = append(endpoints, w.endpointsCPU)
		c.rssPeak = max(c.rssPeak, w.apiRSSPeak, u.apiRSSPeak)
		requests = append(requests, [2]requestCounts{u.requests, w.requests})
		watchedEvents, unwatchedEvents = append(watchedEvents, w.sliceEvents), append(unwatchedEvents, u.sliceEvents)
		watchedRetries, unwatchedRetries = append(watchedRetries, w.sliceRetries), append(unwatchedRetries, u.sliceRetries)
		watchedClosed = append(watchedClosed, w.closedWatches)
		watchedParts, unwatchedParts = append(watchedParts, w.apiParts), append(unwatchedParts, u.apiParts)
		partsDiff = append(partsDiff, partsMinus(w.apiParts, u.apiParts))
		watchedRunWait, unwatchedRunWait = append(watchedRunWait, w.apiRunWait), append(unwatchedRunWait, u.apiRunWait)
		watchedPreempted, unwatchedPreempted = append(watchedPreempted, float64(w.apiPreempted)), append(unwatchedPreempted, float64(u.apiPreempted))
		watchedMachine, unwatchedMachine = append(watchedMachine, w.machineCPU), append(unwatchedMachine, u.machineCPU)
		ws, us := deliveryShare(w.apiParts), deliveryShare(u.apiParts)
		watchedShare, unwatchedShare = append(watchedShare, ws), append(unwatchedShare, us)
		shareCPU = append(shareCPU, time.Duration((ws-us)*float64(u.apiParts["total"])))
	}
	c.watchedShare, c.unwatchedShare, c.shareCPU = median(watchedShare), median(unwatchedShare), median(shareCPU)
	c.watchedRunWait, c.unwatchedRunWait = median(watchedRunWait), median(unwatchedRunWait)
	c.watchedPreempted, c.unwatchedPreempted = median(watchedPreempted), median(unwatchedPreempted)
	c.watchedMachine, c.unwatchedMachine = median(watchedMachine), median(unwatchedMachine)
	c.watchedParts, c.unwatchedParts, c.partsDiff = medianParts(watchedParts), medianParts(unwatchedParts), medianParts(partsDiff)
	c.watchedCPU, c.unwatchedCPU, c.cpu = median(watched), median(unwatched), median(diff)
	c.requests = medianDifference(requests)
	c.watchedEvents, c.unwatchedEvents = median(watchedEvents), median(unwatchedEvents)
	c.watchedRetries, c.unwatchedRetries = median(watchedRetries), median(unwatchedRetries)
	c.watchedClosed = median(watchedClosed)
	c.hubWatchedCPU, c.hubCPU, c.endpointsCPU = median(hubWatched), median(hubDiff), median(endpoints)
	if len(diff) > 0 {
		c.cpuLow, c.cpuHigh = slices.Min(diff), slices.Max(diff)
	}
	return c
}

// partsMinus is a less b, part by part.
func partsMinus(a, b map[string]time.Duration) map[string]time.Duration {
	out := map[string]time.Duration{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] -= v
	}
	return out
}

// medianParts is, part by part, the median over ps (a part missing from
// one counts 0 there).
func medianParts(ps []map[string]time.Duration) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, p := range ps {
		for k := range p {
			out[k] = 0
		}
	}
	for k := range out {
		var ds []time.Duration
		for _, p := range ps {
			ds = append(ds, p[k])
		}
		out[k] = median(ds)
	}
	return out
}

// latencies pools the watched rounds' probe latencies.
func (s proxySide) latencies() []time.Duration {
	var all []time.Duration
	for _, r := range s.rounds {
		all = append(all, r.latencies...)
	}
	return all
}

// overran counts the ticks, over every round, whose writes overran.
func (s proxySide) overran() int {
	n := 0
	for _, r := range s.rounds {
		n += r.overran
	}
	return n
}
