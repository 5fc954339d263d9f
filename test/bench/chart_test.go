package bench

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// durations is n samples from lo growing geometrically by factor.
func durations(n int, lo time.Duration, factor float64) []time.Duration {
	out := make([]time.Duration, n)
	d := float64(lo)
	for i := range out {
		out[i] = time.Duration(d)
		d *= factor
	}
	return out
}

func TestChartDrawsOnePanelPerScenarioWithSamples(t *testing.T) {
	for _, tc := range []struct {
		name    string
		results []*Result
		// want are texts that must appear; absent must not.
		want, absent []string
	}{
		{
			name: "one scenario, one latency",
			results: []*Result{{Scenario: "authz", Latencies: []Latency{
				latencyOf("in-process decision", durations(1000, 300*time.Nanosecond, 1.003))}}},
			want: []string{"authz", "in-process decision", "latency (µs, log scale)", "fraction at or below"},
		},
		{
			name: "several scenarios and latencies, partial marked",
			results: []*Result{
				{Scenario: "authz", Latencies: []Latency{
					latencyOf("in-process decision", durations(200, time.Microsecond, 1.01)),
					latencyOf("webhook review over HTTPS", durations(50, 80*time.Microsecond, 1.05))}},
				{Scenario: "revoke", Partial: true, Latencies: []Latency{
					latencyOf("pod deletion to ERROR 403", durations(30, 2*time.Millisecond, 1.1))}},
			},
			want: []string{"authz", "in-process decision", "webhook review over HTTPS", "revoke (partial)", "pod deletion to ERROR 403"},
		},
		{
			name: "scenario without latencies gets no panel",
			results: []*Result{
				{Scenario: "counts only", Figures: []Figure{{Name: "objects", Value: 3, Unit: "objects"}}},
				{Scenario: "graph", Latencies: []Latency{
					latencyOf("never measured", nil),
					latencyOf("pod write under 2 readers", durations(10, 5*time.Microsecond, 1.5))}},
			},
			want:   []string{"graph", "pod write under 2 readers"},
			absent: []string{"counts only", "never measured"},
		},
		{
			name: "zero, negative and equal durations",
			results: []*Result{{Scenario: "clock", Latencies: []Latency{
				latencyOf("zero and negative", []time.Duration{0, -5, 0, 0}),
				latencyOf("constant", []time.Duration{time.Millisecond, time.Millisecond})}}},
			want: []string{"clock", "zero and negative", "constant", "0.01"},
		},
		{
			name: "one decade: 2x and 5x labelled too",
			results: []*Result{{Scenario: "revoke", Latencies: []Latency{
				latencyOf("pod deletion to ERROR 403", durations(50, 130*time.Microsecond, 1.03))}}},
			want: []string{"100", "200", "500", "1,000"},
		},
		{
			name: "millions of samples",
			results: []*Result{{Scenario: "fanout", Latencies: []Latency{
				latencyOf("one update to all 500 subscribers", durations(2_000_000, time.Microsecond, 1.000005))}}},
			want: []string{"fanout", "one update to all 500 subscribers", "10,000"},
		},
		{
			name: "markup in names",
			results: []*Result{{Scenario: "a <b> & c", Latencies: []Latency{
				latencyOf(`"quoted" & 'single'`, durations(5, time.Microsecond, 2))}}},
			want: []string{"a <b> & c", `"quoted" & 'single'`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteChart(&buf, tc.results); err != nil {
				t.Fatal(err)
			}
			// The biggest test draws 2 million samples: downsampling
			// keeps the file small.
			if buf.Len() > 200_000 {
				t.Errorf("chart is %d bytes, want under 200 kB", buf.Len())
			}
			texts, _ := testserver.SVGText(t, buf.Bytes())
			all := strings.Join(texts, "\n")
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("chart lacks text %q; it has:\n%s", w, all)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(all, a) {
					t.Errorf("chart has text %q, want none", a)
				}
			}
		})
	}
}

func TestChartRefusesNothingToDraw(t *testing.T) {
	for _, tc := range []struct {
		name    string
		results []*Result
	}{
		{"no results", nil},
		{"nil result", []*Result{nil}},
		{"figures only", []*Result{{Scenario: "graph", Figures: []Figure{{Name: "build", Value: 1, Unit: "s"}}}}},
		{"latencies without samples", []*Result{{Scenario: "revoke", Partial: true, Latencies: []Latency{latencyOf("pod deletion to ERROR 403", nil)}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := WriteChart(&buf, tc.results)
			if !errors.Is(err, errNoSamples) || err.Error() != "no latency samples to chart" {
				t.Errorf("err %v, want %q", err, errNoSamples)
			}
			if buf.Len() != 0 {
				t.Errorf("wrote %d bytes, want none", buf.Len())
			}
		})
	}
}

func TestChartPointsAreTheCDFDownsampled(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples []time.Duration
		limit   int
		want    int // points, the leading 0 included
	}{
		{"fewer than the limit: every sample", durations(10, time.Microsecond, 2), 500, 11},
		{"more than the limit: limit ranks", durations(100_000, time.Microsecond, 1.0001), 500, 501},
		{"one sample", []time.Duration{time.Microsecond}, 500, 2},
		{"a limit under 2 still spans the range", durations(10, time.Microsecond, 2), 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := latencyOf("x", tc.samples)
			pts := cdfPoints(l.Samples, tc.limit)
			if len(pts) != tc.want {
				t.Fatalf("%d points, want %d", len(pts), tc.want)
			}
			first, last := pts[0], pts[len(pts)-1]
			if first.Y != 0 || first.X != float64(l.Samples[0].Nanoseconds())/1000 {
				t.Errorf("first point %+v, want (fastest, 0)", first)
			}
			if last.Y != 1 || last.X != l.Max {
				t.Errorf("last point %+v, want (max %v, 1)", last, l.Max)
			}
			for i := 1; i < len(pts); i++ {
				if pts[i].X < pts[i-1].X || pts[i].Y <= pts[i-1].Y {
					t.Fatalf("points %d and %d not increasing: %+v %+v", i-1, i, pts[i-1], pts[i])
				}
			}
		})
	}
}

func TestThousands(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{{0, "0"}, {999.4, "999"}, {999.6, "1,000"}, {15050, "15,050"}, {1234567.8, "1,234,568"}, {-1234, "-1,234"}} {
		if got := Thousands(tc.in); got != tc.want {
			t.Errorf("Thousands(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
