package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nodeproxy/nodeproxy/internal/workload"
)

// Scenario is one named measurement of `nodeproxy bench`.
type Scenario struct {
	Name string
	// Help is one line for --help.
	Help string
	// Run measures env's cluster. On cancellation it returns what it has
	// measured so far with Partial set, and ctx's error.
	Run func(ctx context.Context, env *Env) (*Result, error)
	// NeedsControlPlane scenarios run only when named: they start
	// kube-apiserver and etcd (Env.StartTarget).
	NeedsControlPlane bool
}

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
	// StartTarget starts a control plane with nodeproxy in front, for
	// scenarios that need one.
	StartTarget StartTarget
	Progress    io.Writer
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

// Scenarios are the scenarios in the order `nodeproxy bench` runs them
// when none is named.
var Scenarios = []Scenario{authzScenario, graphScenario, fanoutScenario, revokeScenario, apiserverScenario}

// Lookup returns the scenarios named, or for none every one that runs
// in-process; an unknown name is an error that lists the known ones.
func Lookup(names []string) ([]Scenario, error) {
	if len(names) == 0 {
		var out []Scenario
		for _, s := range Scenarios {
			if !s.NeedsControlPlane {
				out = append(out, s)
			}
		}
		return out, nil
	}
	var out []Scenario
	for _, n := range names {
		i := slices.IndexFunc(Scenarios, func(s Scenario) bool { return s.Name == n })
		if i < 0 {
			known := make([]string, len(Scenarios))
			for j, s := range Scenarios {
				known[j] = s.Name
			}
			return nil, fmt.Errorf("unknown scenario %s: known scenarios are %s", n, strings.Join(known, ", "))
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
