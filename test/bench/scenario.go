package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nodeproxy/nodeproxy/test/workload"
)

// Scenario is one named measurement of `nodeproxy-bench`.
type Scenario struct {
	Name string
	// Help is one line for --help.
	Help string
	// Run measures nodeproxy in this process over env's generated
	// cluster; nil when the scenario needs kube-apiserver. On
	// cancellation it returns what it has measured so far with Partial
	// set, and ctx's error.
	Run func(ctx context.Context, env *Env) (*Result, error)
	// RunAgainst measures a cluster with nodeproxy in front of it (with
	// --kubeconfig, or the local control plane Env.StartTarget starts
	// when the scenario has no Run); nil when the scenario runs only
	// in-process.
	RunAgainst func(ctx context.Context, env *Env, t Target) (*Result, error)
	// LocalOnly marks a scenario that runs programs of its own on this
	// machine against the local control plane (Target.Local), and so
	// takes no --kubeconfig.
	LocalOnly bool
}

// InProcess reports whether s runs without a cluster.
func (s Scenario) InProcess() bool { return s.Run != nil }

// Env is what scenarios share: the generated cluster and where progress
// goes.
type Env struct {
	Shape   workload.Shape
	Cluster *workload.Cluster
	// PhaseDuration is how long each timed phase runs.
	PhaseDuration time.Duration
	// Watch is who watches in the watch scenarios.
	Watch WatchLoad
	// RevokeRate is pod deletions per second in the revoke scenario.
	RevokeRate int
	// Kubelets shapes the kubelets scenario.
	Kubelets KubeletLoad
	// Proxies shapes the proxies scenario.
	Proxies ProxyLoad
	// Causal shapes the causal scenario.
	Causal CausalLoad
	// Failover shapes the failover scenario.
	Failover FailoverLoad
	// NodeView shapes the nodeview scenario.
	NodeView NodeViewLoad
	// Shards shapes the shards scenario.
	Shards   ShardsLoad
	Progress io.Writer
	// Bar, when set, shows a phase of total steps as it advances (a
	// progress bar on a terminal); nil means the phase's line in Progress
	// is all.
	Bar func(total int, what string) Counter
}

// Counter follows a phase of known length.
type Counter interface {
	Add(n int)
	// Done ends the display, whether or not every step was counted.
	Done()
}

type noCounter struct{}

func (noCounter) Add(int) {}
func (noCounter) Done()   {}

// phase announces a phase of total steps and returns what counts them.
func (e *Env) phase(total int, format string, args ...any) Counter {
	what := fmt.Sprintf(format, args...)
	if e.Bar == nil {
		e.progressf("%s", what)
		return noCounter{}
	}
	return e.Bar(total, what)
}

func (e *Env) progressf(format string, args ...any) {
	if e.Progress != nil {
		fmt.Fprintf(e.Progress, format+"\n", args...)
	}
}

// Scenarios are the scenarios in the order `nodeproxy-bench` runs them
// when none is named.
var Scenarios = []Scenario{authzScenario, graphScenario, bulkgetScenario, fanoutScenario, revokeScenario, apiserverScenario, kubeletsScenario, proxiesScenario, causalScenario, failoverScenario, nodeViewScenario, shardsScenario}

// Lookup returns the scenarios named, or for none every one that runs in
// the mode: in-process, or against a cluster (--kubeconfig). An unknown
// name, or one that cannot run in the mode, is an error that lists those
// that can.
func Lookup(names []string, againstCluster bool) ([]Scenario, error) {
	can := func(s Scenario) bool {
		if againstCluster {
			return s.RunAgainst != nil && !s.LocalOnly
		}
		return true
	}
	var known, runnable []string
	var defaults []Scenario
	for _, s := range Scenarios {
		known = append(known, s.Name)
		if can(s) {
			runnable = append(runnable, s.Name)
		}
		if againstCluster && can(s) || !againstCluster && s.InProcess() {
			defaults = append(defaults, s)
		}
	}
	if len(names) == 0 {
		return defaults, nil
	}
	var out []Scenario
	for _, n := range names {
		i := slices.IndexFunc(Scenarios, func(s Scenario) bool { return s.Name == n })
		switch {
		case i < 0:
			return nil, fmt.Errorf("unknown scenario %s: known scenarios are %s", n, strings.Join(known, ", "))
		case !can(Scenarios[i]) && Scenarios[i].LocalOnly:
			return nil, fmt.Errorf("scenario %s runs programs on this machine against a local control plane and takes no --kubeconfig: against a cluster, run %s", n, strings.Join(runnable, ", "))
		case !can(Scenarios[i]):
			return nil, fmt.Errorf("scenario %s measures nodeproxy in this process and takes no --kubeconfig: against a cluster, run %s", n, strings.Join(runnable, ", "))
		}
		out = append(out, Scenarios[i])
	}
	return out, nil
}

// Result is what one scenario measured.
type Result struct {
	Scenario  string    `json:"scenario"`
	Figures   []Figure  `json:"figures"`
	Latencies []Latency `json:"latencies,omitempty"`
	// Partial is set when the run was interrupted: the figures cover
	// what was measured until then.
	Partial bool `json:"partial,omitempty"`
}

// Figure is one number.
type Figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

// Latency is a distribution of durations, in microseconds.
type Latency struct {
	Name  string  `json:"name"`
	Count int     `json:"count"`
	P50   float64 `json:"p50_us"`
	P99   float64 `json:"p99_us"`
	Max   float64 `json:"max_us"`
	// Samples are kept for charts, not written to JSON.
	Samples []time.Duration `json:"-"`
}

// latencyOf summarizes samples (sorting them).
func latencyOf(name string, samples []time.Duration) Latency {
	l := Latency{Name: name, Count: len(samples), Samples: samples}
	if len(samples) == 0 {
		return l
	}
	slices.Sort(samples)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	l.P50, l.P99, l.Max = us(samples[len(samples)/2]), us(samples[len(samples)*99/100]), us(samples[len(samples)-1])
	return l
}

// interrupted ends a scenario that failed with err: when ctx has ended
// (Ctrl-C), with r marked partial and ctx's cause; otherwise with err
// alone, nothing measured being worth showing.
func interrupted(ctx context.Context, r *Result, err error) (*Result, error) {
	if ctx.Err() != nil {
		r.Partial = true
		return r, context.Cause(ctx)
	}
	return nil, err
}
