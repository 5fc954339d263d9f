package bench

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
)

// consistentResults are how the hub served the kubelets' consistent reads
// (resourceVersion "": every reflector's first streaming list, and a
// GET's) of secrets and configmaps, in docs/api.md's words, and what it
// asked kube-apiserver for them.
var consistentResults = []string{"fresh", "caught_up", "confirmed", "too_large", "unavailable", "gone"}

// hubConsistency reads the hub's counters of consistent reads, by
// result, and of the questions and probes they cost, for secrets and
// configmaps together; and the wait histogram's cumulative buckets,
// keyed by their upper bound.
func hubConsistency(ctx context.Context, t Target) (counts map[string]float64, waits map[float64]float64, err error) {
	m, err := t.Nodeproxy.Metrics(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("scrape the hub: %w", err)
	}
	counts, waits = map[string]float64{}, map[float64]float64{}
	for _, r := range []string{"secrets", "configmaps"} {
		for _, res := range consistentResults {
			counts[res] += m.Sum("nodeproxy_bulk_consistent_reads_total", "resource", r, "result", res)
		}
		counts["questions"] += m.Sum("nodeproxy_bulk_latest_version_requests_total", "resource", r)
		counts["probes"] += m.Sum("nodeproxy_bulk_progress_probes_total", "resource", r)
	}
	if f := m["nodeproxy_bulk_consistent_read_wait_seconds"]; f != nil {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "resource" && (l.GetValue() == "secrets" || l.GetValue() == "configmaps") {
					for _, b := range s.GetHistogram().GetBucket() {
						waits[b.GetUpperBound()] += float64(b.GetCumulativeCount())
					}
				}
			}
		}
	}
	return counts, waits, nil
}

// waitQuantile is the upper bound of the bucket in which quantile q of
// the total reads counted between before and after falls: an upper
// bound on the wait of that quantile.
func waitQuantile(before, after map[float64]float64, total, q float64) float64 {
	if total == 0 {
		return 0
	}
	for _, le := range slices.Sorted(maps.Keys(after)) {
		if after[le]-before[le] >= q*total {
			return le
		}
	}
	return math.Inf(1)
}

// consistencyFigures are the hub's counts over the side behind the
// endpoints, a round's worth (the idle period's counted in the last).
func consistencyFigures(before, after map[string]float64, waitsBefore, waitsAfter map[float64]float64, rounds int) []Figure {
	per := func(k string) float64 { return (after[k] - before[k]) / float64(max(rounds, 1)) }
	var out []Figure
	reads := 0.0
	for _, res := range consistentResults {
		out = append(out, Figure{"hub consistent reads of the objects a round, behind endpoints: " + res, per(res), ""})
		reads += after[res] - before[res]
	}
	for _, q := range []float64{.5, .9, .99} {
		out = append(out, Figure{fmt.Sprintf("hub consistent read wait of the objects, p%g, at most", q*100), waitQuantile(waitsBefore, waitsAfter, reads, q), "s"})
	}
	return append(out,
		Figure{"hub questions to kube-apiserver for its version a round (LIST limit 1)", per("questions"), ""},
		Figure{"hub progress probes a round (short WATCH until a bookmark)", per("probes"), ""})
}
