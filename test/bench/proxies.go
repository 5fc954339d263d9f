package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// ProxyLoad shapes the proxies scenario.
type ProxyLoad struct {
	// Nodes each run a hollow kubelet and a hollow proxy (real kubelet
	// and kube-proxy code), and behind endpoints an endpoint both go
	// through.
	Nodes int
	// Services each have one EndpointSlice that churns; as many
	// EndpointSlices that the proxies do not watch churn in the
	// unwatched rounds.
	Services int
	// Churn is how long a churn round lasts; every Interval of it, each
	// of its EndpointSlices changes once and one new EndpointSlice (a
	// probe) is created, whose arrival the proxies log by name.
	Churn, Interval time.Duration
	// Pairs of churn rounds run on each side: one changing the slices
	// the proxies watch, one changing as many that kube-proxy's selector
	// leaves out (labelled service.kubernetes.io/headless). Both write
	// the same; their difference is what delivering the changes to the
	// nodes costs, and the pairs give it a median.
	Pairs int
	// RestartWindow is how long after kube-apiserver's restart is ready
	// its requests are counted.
	RestartWindow time.Duration
	// Profiles, when set, is a directory the scenario writes
	// kube-apiserver's CPU profile of every churn round to, for `go tool
	// pprof` (docs/benchmarks.md says how they are compared).
	Profiles string
	// Nice, when not 0, is the niceness the hub and every node's
	// processes (hollow kubelet, hollow proxy, endpoint) run at, on both
	// sides: in a cluster they run on other machines than
	// kube-apiserver, and here they would otherwise take its CPU in the
	// moments it is busiest (docs/benchmarks.md says what it changes).
	Nice int
}

// DefaultProxyLoad is issue 25's shape: 20 nodes, 50 Services whose
// EndpointSlices change every second for a minute, requests counted for
// the minute after a restart.
func DefaultProxyLoad() ProxyLoad {
	return ProxyLoad{Nodes: 20, Services: 50, Churn: time.Minute, Interval: time.Second, Pairs: 2, RestartWindow: time.Minute}
}

var proxiesScenario = Scenario{
	Name: "proxies",
	Help: "real kubelet and kube-proxy code (hollow kubelets and proxies, each proxy with its own token) under EndpointSlice churn and a kube-apiserver restart: " +
		"straight on kube-apiserver, then each node behind a nodeproxy node endpoint (local control plane only: run from a checkout)",
	RunAgainst: runProxies,
	LocalOnly:  true,
}

func runProxies(ctx context.Context, env *Env, t Target) (*Result, error) {
	if t.Local == nil {
		return nil, errors.New("proxies runs hollow kubelets, hollow proxies and node endpoints on this machine: it needs the local control plane, not --kubeconfig")
	}
	if len(t.Local.NodeEndpoint) == 0 {
		return nil, errors.New("proxies needs a nodeproxy binary to run as node endpoints")
	}
	tools, err := controlplane.EnsureTools(ctx, env.Progress, "kubemark")
	if err != nil {
		return nil, err
	}
	admin, err := kubernetes.NewForConfig(t.Admin)
	if err != nil {
		return nil, err
	}
	if err := GrantKubeProxy(ctx, t.Local.ControlPlane); err != nil {
		return nil, err
	}
	if n := env.Proxies.Nice; n != 0 {
		if err := t.Local.Hub.Process.SetNice(n); err != nil {
			return nil, err
		}
	}
	// What holds watches before any node runs: kube-apiserver's own
	// informers and the hub's. After each restart of kube-apiserver the
	// scenario waits for them to be back.
	hubOwn, err := controlplane.ReadLongRunningRequests(ctx, admin.CoreV1().RESTClient())
	if err != nil {
		return nil, err
	}
	r := &Result{Scenario: "proxies"}
	direct, err := runProxySide(ctx, env, t, admin, tools["kubemark"], hubOwn, false)
	if err != nil {
		return interrupted(ctx, r, fmt.Errorf("nodes straight on kube-apiserver: %w", err))
	}
	fronted, err := runProxySide(ctx, env, t, admin, tools["kubemark"], hubOwn, true)
	if err != nil {
		return interrupted(ctx, r, fmt.Errorf("nodes behind node endpoints: %w", err))
	}
	r.Figures, r.Latencies = proxyFigures(env.Proxies, direct, fronted)
	return r, nil
}

// GrantKubeProxy binds kube-proxy's ServiceAccount as kubeadm does
// (system:node-proxier) and as the kube-proxy component does
// (nodeproxy:bulk-clients, the door to the hub's bulk API); make demo's
// nodes use it too.
func GrantKubeProxy(ctx context.Context, cp *controlplane.ControlPlane) error {
	if err := cp.EnsureKubeProxyRBAC(ctx); err != nil {
		return err
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	return cp.ApplyFiles(ctx, filepath.Join(root, "manifests", "components", "kube-proxy", "rbac-bulk-clients.yaml"))
}

// proxyFigures sets both sides side by side.
func proxyFigures(l ProxyLoad, direct, fronted proxySide) ([]Figure, []Latency) {
	dr, fr := direct.restart, fronted.restart
	figures := []Figure{
		{"hollow kubelets, and as many hollow proxies", float64(l.Nodes), ""},
		{fmt.Sprintf("EndpointSlices changed every %s for %s a churn round", l.Interval, l.Churn), float64(l.Services), ""},
		{"long-running requests on kube-apiserver without the nodes (its own informers' and the hub's), direct", float64(direct.withoutNodes.Count("", "")), ""},
		{"long-running requests on kube-apiserver without the nodes (its own informers' and the hub's), behind endpoints", float64(fronted.withoutNodes.Count("", "")), ""},
		{"long-running requests on kube-apiserver from the nodes, direct", float64(direct.fromNodes.Count("", "")), ""},
		{"long-running requests on kube-apiserver from the nodes, behind endpoints", float64(fronted.fromNodes.Count("", "")), ""},
	}
	figures = append(figures, sideBySide("long-running requests on kube-apiserver from the nodes", longRunningCounts(direct.fromNodes), longRunningCounts(fronted.fromNodes))...)
	figures = append(figures, churnFigures(direct.churnCost(), fronted.churnCost())...)
	figures = append(figures, Figure{"churn ticks whose writes overran the interval, both sides", float64(direct.overran() + fronted.overran()), ""})
	figures = append(figures, restartFigures(l, dr, fr)...)
	latencies := []Latency{
		latencyOf("new EndpointSlice during the churn to the proxy's log line read by the bench, direct", direct.latencies()),
		latencyOf("new EndpointSlice during the churn to the proxy's log line read by the bench, behind endpoints", fronted.latencies()),
		latencyOf("first EndpointSlice after kube-apiserver's restart to the proxy's log line, direct", dr.arrivals),
		latencyOf("first EndpointSlice after kube-apiserver's restart to the proxy's log line, behind endpoints", fr.arrivals),
	}
	return figures, latencies
}

// churnFigures set the churn rounds' costs side by side.
func churnFigures(d, f churnCost) []Figure {
	secs := func(d time.Duration) float64 { return d.Seconds() }
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	figures := []Figure{
		{"kube-apiserver CPU a churn round, watched slices, direct", secs(d.watchedCPU), "s"},
		{"kube-apiserver CPU a churn round, unwatched slices, direct", secs(d.unwatchedCPU), "s"},
		{"kube-apiserver CPU a churn round, watched slices, behind endpoints", secs(f.watchedCPU), "s"},
		{"kube-apiserver CPU a churn round, unwatched slices, behind endpoints", secs(f.unwatchedCPU), "s"},
		{"kube-apiserver CPU delivering the churn to the nodes a round, direct", secs(d.cpu), "s"},
		{"kube-apiserver CPU delivering the churn to the nodes a round, behind endpoints", secs(f.cpu), "s"},
		{"kube-apiserver CPU delivering the churn, lowest pair, direct", secs(d.cpuLow), "s"},
		{"kube-apiserver CPU delivering the churn, highest pair, direct", secs(d.cpuHigh), "s"},
		{"kube-apiserver CPU delivering the churn, lowest pair, behind endpoints", secs(f.cpuLow), "s"},
		{"kube-apiserver CPU delivering the churn, highest pair, behind endpoints", secs(f.cpuHigh), "s"},
	}
	figures = append(figures,
		Figure{"EndpointSlice events kube-apiserver sent its watchers a churn round, watched slices, direct", d.watchedEvents, ""},
		Figure{"EndpointSlice events kube-apiserver sent its watchers a churn round, unwatched slices, direct", d.unwatchedEvents, ""},
		Figure{"EndpointSlice events kube-apiserver sent its watchers a churn round, watched slices, behind endpoints", f.watchedEvents, ""},
		Figure{"EndpointSlice events kube-apiserver sent its watchers a churn round, unwatched slices, behind endpoints", f.unwatchedEvents, ""},
		Figure{"EndpointSlice watches kube-apiserver closed for not keeping up a churn round, watched slices, direct", d.watchedClosed, ""},
		Figure{"EndpointSlice watches kube-apiserver closed for not keeping up a churn round, watched slices, behind endpoints", f.watchedClosed, ""},
		Figure{"EndpointSlice writes tried again on a stale watch cache a churn round, watched slices, direct", d.watchedRetries, ""},
		Figure{"EndpointSlice writes tried again on a stale watch cache a churn round, unwatched slices, direct", d.unwatchedRetries, ""},
		Figure{"EndpointSlice writes tried again on a stale watch cache a churn round, watched slices, behind endpoints", f.watchedRetries, ""},
		Figure{"EndpointSlice writes tried again on a stale watch cache a churn round, unwatched slices, behind endpoints", f.unwatchedRetries, ""},
	)
	figures = append(figures, ratioFigure("ratio of kube-apiserver CPU a churn round, watched slices, direct / behind endpoints", secs(d.watchedCPU), secs(f.watchedCPU))...)
	figures = append(figures, ratioFigure("ratio of kube-apiserver CPU delivering the churn, direct / behind endpoints", secs(d.cpu), secs(f.cpu))...)
	figures = append(figures, profileFigures(d, f)...)
	figures = append(figures,
		Figure{"hub CPU a churn round, watched slices, behind endpoints", secs(f.hubWatchedCPU), "s"},
		Figure{"hub CPU delivering the churn to the nodes a round, behind endpoints", secs(f.hubCPU), "s"},
		Figure{"endpoints' CPU a churn round, watched slices, all nodes", secs(f.endpointsCPU), "s"},
		Figure{"kube-apiserver RSS, peak during the churn, direct", mib(d.rssPeak), "MiB"},
		Figure{"kube-apiserver RSS, peak during the churn, behind endpoints", mib(f.rssPeak), "MiB"},
	)
	figures = append(figures, sideBySide("kube-apiserver requests delivering the churn a round", d.requests, f.requests)...)
	return figures
}

// deliveryFigure names, in figures, kube-apiserver's CPU profile's
// watchDelivery and httpServing together.
const deliveryFigure = "watch delivery and HTTP/2"

// profileFigures set kube-apiserver's CPU profiles of the churn rounds
// side by side: watch delivery (watchDelivery and httpServing), whose
// difference between a watched and an unwatched round is delivering the
// churn to the nodes; every part of that difference, the writes' among
// them, which are the same work in both rounds and so show what the
// machine's contention adds to a round's CPU; and that contention
// itself, as the time kube-apiserver waited for a CPU.
func profileFigures(d, f churnCost) []Figure {
	secs := func(d time.Duration) float64 { return d.Seconds() }
	delivery := func(parts map[string]time.Duration) float64 {
		return secs(parts[watchDelivery.name] + parts[httpServing.name])
	}
	const w = deliveryFigure
	figures := []Figure{
		{"kube-apiserver CPU profile, " + w + ", a churn round, watched slices, direct", delivery(d.watchedParts), "s"},
		{"kube-apiserver CPU profile, " + w + ", a churn round, unwatched slices, direct", delivery(d.unwatchedParts), "s"},
		{"kube-apiserver CPU profile, " + w + ", a churn round, watched slices, behind endpoints", delivery(f.watchedParts), "s"},
		{"kube-apiserver CPU profile, " + w + ", a churn round, unwatched slices, behind endpoints", delivery(f.unwatchedParts), "s"},
		{"kube-apiserver CPU profile, " + w + " to the nodes a round (watched less unwatched), direct", delivery(d.partsDiff), "s"},
		{"kube-apiserver CPU profile, " + w + " to the nodes a round (watched less unwatched), behind endpoints", delivery(f.partsDiff), "s"},
	}
	figures = append(figures, ratioFigure("ratio of kube-apiserver CPU profile, "+w+" to the nodes, direct / behind endpoints", delivery(d.partsDiff), delivery(f.partsDiff))...)
	pct := func(x float64) float64 { return 100 * x }
	figures = append(figures,
		Figure{"share of kube-apiserver's profiled CPU in " + w + ", watched slices, direct", pct(d.watchedShare), "%"},
		Figure{"share of kube-apiserver's profiled CPU in " + w + ", unwatched slices, direct", pct(d.unwatchedShare), "%"},
		Figure{"share of kube-apiserver's profiled CPU in " + w + ", watched slices, behind endpoints", pct(f.watchedShare), "%"},
		Figure{"share of kube-apiserver's profiled CPU in " + w + ", unwatched slices, behind endpoints", pct(f.unwatchedShare), "%"},
		Figure{"kube-apiserver CPU profile, " + w + " to the nodes a round by share (share watched less unwatched, times the unwatched round's CPU), direct", secs(d.shareCPU), "s"},
		Figure{"kube-apiserver CPU profile, " + w + " to the nodes a round by share (share watched less unwatched, times the unwatched round's CPU), behind endpoints", secs(f.shareCPU), "s"},
	)
	names := []string{"total"}
	for _, p := range apiCPUParts {
		names = append(names, p.name)
	}
	names = append(names, "other")
	for _, side := range []struct {
		way  string
		diff map[string]time.Duration
	}{{"direct", d.partsDiff}, {"behind endpoints", f.partsDiff}} {
		for _, n := range names {
			figures = append(figures, Figure{"kube-apiserver CPU profile, watched less unwatched round, " + side.way + ": " + n, secs(side.diff[n]), "s"})
		}
	}
	writes := writesPart.name
	for _, side := range []struct {
		way string
		c   churnCost
	}{{"direct", d}, {"behind endpoints", f}} {
		figures = append(figures, ratioFigure("kube-apiserver CPU profile, the same writes, watched / unwatched round, "+side.way,
			secs(side.c.watchedParts[writes]), secs(side.c.unwatchedParts[writes]))...)
	}
	figures = append(figures,
		Figure{"kube-apiserver waiting for a CPU a churn round, watched slices, direct", secs(d.watchedRunWait), "s"},
		Figure{"kube-apiserver waiting for a CPU a churn round, unwatched slices, direct", secs(d.unwatchedRunWait), "s"},
		Figure{"kube-apiserver waiting for a CPU a churn round, watched slices, behind endpoints", secs(f.watchedRunWait), "s"},
		Figure{"kube-apiserver waiting for a CPU a churn round, unwatched slices, behind endpoints", secs(f.unwatchedRunWait), "s"},
		Figure{"kube-apiserver's threads preempted by another a churn round, watched slices, direct", d.watchedPreempted, ""},
		Figure{"kube-apiserver's threads preempted by another a churn round, unwatched slices, direct", d.unwatchedPreempted, ""},
		Figure{"kube-apiserver's threads preempted by another a churn round, watched slices, behind endpoints", f.watchedPreempted, ""},
		Figure{"kube-apiserver's threads preempted by another a churn round, unwatched slices, behind endpoints", f.unwatchedPreempted, ""},
		Figure{"CPU used on the machine a churn round, every process, watched slices, direct", secs(d.watchedMachine), "s"},
		Figure{"CPU used on the machine a churn round, every process, unwatched slices, direct", secs(d.unwatchedMachine), "s"},
		Figure{"CPU used on the machine a churn round, every process, watched slices, behind endpoints", secs(f.watchedMachine), "s"},
		Figure{"CPU used on the machine a churn round, every process, unwatched slices, behind endpoints", secs(f.unwatchedMachine), "s"},
	)
	return figures
}

// restartFigures set what kube-apiserver's restart cost side by side,
// against the same window with no restart: what the window holds beyond
// that is the restart's.
func restartFigures(l ProxyLoad, dr, fr restartResult) []Figure {
	secs := func(d time.Duration) float64 { return d.Seconds() }
	after := fmt.Sprintf("kube-apiserver requests in the %s after its restart is ready", l.RestartWindow)
	steady := fmt.Sprintf("kube-apiserver requests in %s with no restart", l.RestartWindow)
	added := func(r restartResult) float64 { return r.requests.total() - r.steady.total() }
	figures := []Figure{
		{after + ", direct", dr.requests.total(), ""},
		{after + ", behind endpoints", fr.requests.total(), ""},
		{steady + ", direct", dr.steady.total(), ""},
		{steady + ", behind endpoints", fr.steady.total(), ""},
		{"requests the restart added (after it less with none), direct", added(dr), ""},
		{"requests the restart added (after it less with none), behind endpoints", added(fr), ""},
		{"of them lists and watches after its restart, direct", dr.requests.reads(), ""},
		{"of them lists and watches after its restart, behind endpoints", fr.requests.reads(), ""},
		{"of them lists and watches with no restart, direct", dr.steady.reads(), ""},
		{"of them lists and watches with no restart, behind endpoints", fr.steady.reads(), ""},
	}
	figures = append(figures, ratioFigure("ratio of kube-apiserver requests after its restart, direct / behind endpoints", dr.requests.total(), fr.requests.total())...)
	figures = append(figures, ratioFigure("ratio of requests the restart added, direct / behind endpoints", added(dr), added(fr))...)
	figures = append(figures, ratioFigure("ratio of its lists and watches after its restart, direct / behind endpoints", dr.requests.reads(), fr.requests.reads())...)
	figures = append(figures, sideBySide("kube-apiserver requests after its restart", dr.requests, fr.requests)...)
	figures = append(figures, sideBySide(steady, dr.steady, fr.steady)...)
	figures = append(figures, sideBySide("kube-apiserver requests after its restart", dr.byFlowSchema, fr.byFlowSchema)...)
	figures = append(figures, sideBySide(steady, dr.steadyByFlowSchema, fr.steadyByFlowSchema)...)
	figures = append(figures,
		Figure{"kube-apiserver restart, stopped to ready, direct", secs(dr.readyTook), "s"},
		Figure{"kube-apiserver restart, stopped to ready, behind endpoints", secs(fr.readyTook), "s"},
		Figure{"first change after the restart, until every proxy saw it, direct", secs(maxDuration(dr.arrivals)), "s"},
		Figure{"first change after the restart, until every proxy saw it, behind endpoints", secs(maxDuration(fr.arrivals)), "s"},
	)
	return figures
}

// ratioFigure is a / b as a figure, or none when b is not positive (a
// cost that vanished into the noise has no ratio).
func ratioFigure(name string, a, b float64) []Figure {
	if b <= 0 || math.IsNaN(a) {
		return nil
	}
	return []Figure{{name, a / b, "x"}}
}

// longRunningCounts are l by "VERB resource", as requestCounts.
func longRunningCounts(l controlplane.LongRunningRequests) requestCounts {
	out := requestCounts{}
	for k, v := range l.ByVerbResource() {
		if v != 0 {
			out[k] = float64(v)
		}
	}
	return out
}
