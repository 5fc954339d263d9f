package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// small is a cluster shape that generates in milliseconds.
var small = []string{"--nodes=20", "--pods-per-node=5", "--namespaces=4", "--attachments-per-node=2", "--watch-nodes=10", "--channels-per-node=4", "--updates=50", "--phase-duration=200ms"}

func TestBenchReportsEveryScenario(t *testing.T) {
	chart := filepath.Join(t.TempDir(), "bench.svg")
	out, code := run(t, 2*time.Minute, append([]string{"--output=json", "--chart=" + chart}, small...)...)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	var report struct {
		Shape   struct{ Nodes int }
		Results []struct {
			Scenario string
			Partial  bool
			Figures  []struct {
				Name  string
				Value float64
			}
			Latencies []struct {
				Name  string
				Count int
				P50   float64 `json:"p50_us"`
			}
		}
	}
	decodeReport(t, out, &report)
	if report.Shape.Nodes != 20 {
		t.Errorf("shape %+v, want the flags' 20 nodes", report.Shape)
	}
	var scenarios []string
	for _, r := range report.Results {
		scenarios = append(scenarios, r.Scenario)
		if r.Partial || len(r.Figures) == 0 || len(r.Latencies) == 0 {
			t.Errorf("%s: partial or empty: %+v", r.Scenario, r)
		}
		for _, f := range r.Figures {
			if f.Value <= 0 {
				t.Errorf("%s: %s = %v", r.Scenario, f.Name, f.Value)
			}
		}
		for _, l := range r.Latencies {
			if l.Count == 0 || l.P50 <= 0 {
				t.Errorf("%s: latency %+v", r.Scenario, l)
			}
		}
	}
	if strings.Join(scenarios, ",") != "authz,graph,bulkget,fanout,revoke" {
		t.Errorf("scenarios %v, want authz,graph,bulkget,fanout,revoke", scenarios)
	}

	// --chart: an SVG with a panel titled by each scenario and a curve
	// named by each latency.
	doc, err := os.ReadFile(chart)
	if err != nil {
		t.Fatal(err)
	}
	texts, _ := testserver.SVGText(t, doc)
	for _, r := range report.Results {
		if !slices.Contains(texts, r.Scenario) {
			t.Errorf("chart has no title %q; its texts are %q", r.Scenario, texts)
		}
		for _, l := range r.Latencies {
			if !slices.Contains(texts, l.Name) {
				t.Errorf("chart has no curve named %q; its texts are %q", l.Name, texts)
			}
		}
	}
}

func TestBenchRefusesBadInvocations(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"zero nodes", []string{"--nodes=0"}, "nodes must be positive, got 0"},
		{"negative secrets", []string{"--secrets-per-pod=-1"}, "unique secrets per pod must not be negative"},
		{"more shared per pod than exist", []string{"--shared-secrets-per-pod=3", "--shared-secrets-per-namespace=2"},
			"--shared-secrets-per-pod (3) must not exceed --shared-secrets-per-namespace (2)"},
		{"more namespaces than pods", []string{"--nodes=1", "--pods-per-node=2", "--namespaces=5"}, "--namespaces (5) must not outnumber the pods (2)"},
		{"unknown scenario", []string{"--nodes=2", "--pods-per-node=2", "--namespaces=1", "nosuch"}, "unknown scenario nosuch: known scenarios are authz, graph, bulkget, fanout, revoke, apiserver"},
		{"unknown output", []string{"--output=xml"}, "--output must be table or json"},
		{"zero phase", []string{"--phase-duration=0s"}, "--phase-duration must be positive"},
		{"too many updates", []string{"--updates=5000"}, "--updates must be at most 1000"},
		{"zero object size", []string{"--object-size=0"}, "--object-size must be positive"},
		{"chart in a missing directory", []string{"--chart=/nonexistent-nodeproxy-dir/bench.svg"},
			"--chart /nonexistent-nodeproxy-dir/bench.svg: directory /nonexistent-nodeproxy-dir: stat /nonexistent-nodeproxy-dir: no such file or directory"},
		{"chart onto a directory", []string{"--chart=/"}, "--chart /: is a directory"},
		{"profiles in a missing directory", []string{"--proxy-profiles=/nonexistent-nodeproxy-dir"}, "--proxy-profiles: stat /nonexistent-nodeproxy-dir: no such file or directory"},
		{"negative niceness", []string{"--proxy-nice=-5"}, "--proxy-nice must be from 0 to 19, got -5"},
		{"profiles into a file", []string{"--proxy-profiles=/etc/hostname"}, "--proxy-profiles /etc/hostname: not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			out, code := run(t, 30*time.Second, tc.args...)
			if code == 0 {
				t.Fatalf("exit 0, want non-zero:\n%s", out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("output does not say %q:\n%s", tc.want, out)
			}
			if strings.Contains(out, "generated") {
				t.Errorf("work started before the refusal (%s):\n%s", time.Since(start), out)
			}
		})
	}
}

// TestBenchInterruptPrintsPartialResults: Ctrl-C during a long phase stops
// the run at once, prints what was measured, and exits non-zero.
func TestBenchInterruptPrintsPartialResults(t *testing.T) {
	// The chart is attempted too; interrupted before any latency was
	// timed, it has nothing to draw and says so.
	chart := filepath.Join(t.TempDir(), "bench.svg")
	args := append([]string{"authz", "--chart=" + chart}, small...)
	cmd := exec.Command(bin, append(args, "--phase-duration=10m")...) // the last --phase-duration wins
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	lines := bufio.NewScanner(stderr)
	for lines.Scan() {
		if strings.Contains(lines.Text(), "in-process decisions for 10m") {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	rest := strings.Builder{}
	for lines.Scan() {
		rest.WriteString(lines.Text() + "\n")
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("exit 0 after an interrupt")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("still running 30s after SIGINT")
	}
	if !strings.Contains(stdout.String(), "authz (partial: interrupted)") || !strings.Contains(stdout.String(), "in-process decisions, 1 goroutine") {
		t.Errorf("stdout lacks the partial results:\n%s", stdout.String())
	}
	if !strings.Contains(rest.String(), "interrupted (interrupt signal received): the results above are partial") {
		t.Errorf("stderr does not say the run was interrupted:\n%s", rest.String())
	}
	if !strings.Contains(rest.String(), "--chart "+chart+": no latency samples to chart") {
		t.Errorf("stderr does not say the chart had nothing to draw:\n%s", rest.String())
	}
	if _, err := os.Stat(chart); !os.IsNotExist(err) {
		t.Errorf("chart with nothing to draw: stat says %v, want no file", err)
	}
}

// decodeReport decodes the JSON report in out into v. Progress goes to
// stderr, mixed into out here: the JSON is the object that starts at the
// first line that is "{".
func decodeReport(t *testing.T, out string, v any) {
	t.Helper()
	i := strings.Index(out, "\n{")
	if i < 0 {
		t.Fatalf("no JSON in the output:\n%s", out)
	}
	if err := json.NewDecoder(strings.NewReader(out[i+1:])).Decode(v); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
}
