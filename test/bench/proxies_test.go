package bench

import (
	"context"
	"testing"
	"time"
)

// TestProxiesScenario runs the proxies scenario small: two nodes, each a
// hollow kubelet and a hollow proxy, straight on kube-apiserver and then
// behind node endpoints run from the binary under test, two Services
// churning for three seconds, one pair of rounds, five seconds counted
// after each restart of kube-apiserver, and in a window as long with no
// restart; the hub and the nodes' processes run at niceness 10.
func TestProxiesScenario(t *testing.T) {
	env := &Env{Proxies: ProxyLoad{Nodes: 2, Services: 2, Churn: 3 * time.Second, Interval: time.Second, Pairs: 1, RestartWindow: 5 * time.Second, Nice: 10}}
	r, err := runProxies(context.Background(), env, localTarget(t, startNodeproxy(t)))
	if err != nil {
		t.Fatal(err)
	}
	figures := map[string]float64{}
	for _, f := range r.Figures {
		figures[f.Name] = f.Value
		t.Logf("%s: %v %s", f.Name, f.Value, f.Unit)
	}
	for _, l := range r.Latencies {
		t.Logf("%s: p50 %.0f µs, p99 %.0f µs, %d samples", l.Name, l.P50, l.P99, l.Count)
	}
	figure := func(name string) float64 {
		v, ok := figures[name]
		if !ok {
			t.Fatalf("no figure %q in %+v", name, r.Figures)
		}
		return v
	}
	// Each proxy watches services, endpointslices and servicecidrs, and
	// each kubelet services too.
	const direct = "long-running requests on kube-apiserver from the nodes, direct: "
	for what, want := range map[string]float64{"WATCH endpointslices": 2, "WATCH servicecidrs": 2, "WATCH services": 4} {
		if got := figure(direct + what); got != want {
			t.Errorf("%s%s: %v, want %v", direct, what, got, want)
		}
	}
	// Behind endpoints every watch of theirs is on the hub: kube-apiserver
	// holds none from the nodes, only its own and the hub's.
	if got := figure("long-running requests on kube-apiserver from the nodes, behind endpoints"); got != 0 {
		t.Errorf("long-running requests on kube-apiserver from the nodes behind endpoints: %v, want 0", got)
	}
	// Three ticks change two slices and add a probe: direct, each of the
	// two proxies' watches and the hub's hear them, unwatched slices only
	// the hub's; behind endpoints the hub's alone hears either.
	for what, want := range map[string]float64{"watched slices, direct": 27, "unwatched slices, direct": 15, "watched slices, behind endpoints": 9, "unwatched slices, behind endpoints": 9} {
		name := "EndpointSlice events kube-apiserver sent its watchers a churn round, " + what
		if got := figure(name); got < want {
			t.Errorf("%s: %v, want at least %v", name, got, want)
		}
	}
	for _, name := range []string{
		"kube-apiserver CPU a churn round, watched slices, direct", "kube-apiserver CPU a churn round, watched slices, behind endpoints",
		"kube-apiserver RSS, peak during the churn, direct", "kube-apiserver RSS, peak during the churn, behind endpoints",
		"kube-apiserver requests in the 5s after its restart is ready, direct", "of them lists and watches after its restart, direct",
		"kube-apiserver requests in the 5s after its restart is ready, behind endpoints",
		"kube-apiserver requests in 5s with no restart, direct", "kube-apiserver requests in 5s with no restart, behind endpoints",
		"first change after the restart, until every proxy saw it, direct", "first change after the restart, until every proxy saw it, behind endpoints",
	} {
		if got := figure(name); got <= 0 {
			t.Errorf("%s not measured: %v", name, got)
		}
	}
	// kube-apiserver's CPU profile is taken over every round and read by
	// part (a round this short may hold no delivery sample, so the
	// figures are only there).
	for _, way := range []string{"direct", "behind endpoints"} {
		figure("kube-apiserver CPU profile, watched less unwatched round, " + way + ": total")
		figure("kube-apiserver CPU profile, " + deliveryFigure + " to the nodes a round (watched less unwatched), " + way)
	}
	// Three probes a round reach each of two proxies; the change after
	// the restart reaches both.
	want := map[string]int{
		"new EndpointSlice during the churn to the proxy's log line read by the bench, direct":           6,
		"new EndpointSlice during the churn to the proxy's log line read by the bench, behind endpoints": 6,
		"first EndpointSlice after kube-apiserver's restart to the proxy's log line, direct":             2,
		"first EndpointSlice after kube-apiserver's restart to the proxy's log line, behind endpoints":   2,
	}
	for _, l := range r.Latencies {
		if l.Count != want[l.Name] || l.P50 <= 0 {
			t.Errorf("%s: %d samples, p50 %v µs; want %d samples", l.Name, l.Count, l.P50, want[l.Name])
		}
		delete(want, l.Name)
	}
	if len(want) > 0 {
		t.Errorf("latencies missing: %v", want)
	}
}
