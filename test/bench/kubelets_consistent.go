package bench

import (
	"context"
	"fmt"
	"math"
)

// consistentResults are how the hub served the kubelets' consistent reads
// (resourceVersion "": every reflector's first streaming list, and a
// GET's) of secrets and configmaps, in docs/api.md's words, and what it
// asked kube-apiserver for them.
var consistentResults = []string{"fresh", "caught_up", "confirmed", "too_large", "unavailable", "gone"}

// hubConsistency reads the hub's counters of consistent reads, by
// result, and of the questions and probes they cost, for secrets and
// configmaps together.
func hubConsistency(ctx context.Context, t Target) (map[string]float64, error) {
	m, err := t.Nodeproxy.Metrics(ctx)
	if err != nil {
		return nil, fmt.Errorf("scrape the hub: %w", err)
	}
	out := map[string]float64{}
	for _, r := range []string{"secrets", "configmaps"} {
		for _, res := range consistentResults {
			out[res] += m.Sum("nodeproxy_bulk_consistent_reads_total", "resource", r, "result", res)
		}
		out["questions"] += m.Sum("nodeproxy_bulk_latest_version_requests_total", "resource", r)
		out["probes"] += m.Sum("nodeproxy_bulk_progress_probes_total", "resource", r)
		for _, b := range waitBuckets(m, r) {
			out[b.key] += b.count
		}
	}
	return out, nil
}

// waitBucket is one cumulative bucket of the hub's consistent read wait
// histogram: the reads that waited at most le seconds.
type waitBucket struct {
	key   string
	le    float64
	count float64
}

// waitBuckets are resource's buckets of
// nodeproxy_bulk_consistent_read_wait_seconds, keyed "le=<bound>".
func waitBuckets(m Metrics, resource string) []waitBucket {
	f := m["nodeproxy_bulk_consistent_read_wait_seconds"]
	if f == nil {
		return nil
	}
	var out []waitBucket
	for _, s := range f.GetMetric() {
		match := false
		for _, l := range s.GetLabel() {
			match = match || l.GetName() == "resource" && l.GetValue() == resource
		}
		if !match || s.GetHistogram() == nil {
			continue
		}
		for _, b := range s.GetHistogram().GetBucket() {
			out = append(out, waitBucket{key: fmt.Sprintf("le=%g", b.GetUpperBound()), le: b.GetUpperBound(), count: float64(b.GetCumulativeCount())})
		}
	}
	return out
}

// waitQuantile is the upper bound of the bucket in which quantile q of
// the reads counted between before and after falls: an upper bound on
// the wait of that quantile.
func waitQuantile(before, after map[string]float64, bounds []float64, q float64) float64 {
	total := 0.0
	for _, res := range consistentResults {
		total += after[res] - before[res]
	}
	if total == 0 {
		return 0
	}
	for _, le := range bounds {
		k := fmt.Sprintf("le=%g", le)
		if after[k]-before[k] >= q*total {
			return le
		}
	}
	return math.Inf(1)
}

// consistentWaitBounds are the histogram's bucket bounds (bulk/metrics.go).
var consistentWaitBounds = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, .75, 1, 1.5, 2, 3, 4, 6}

// consistencyFigures are the hub's counts over the side behind the
// endpoints, a round's worth (the idle period's counted in the last).
func consistencyFigures(before, after map[string]float64, rounds int) []Figure {
	per := func(k string) float64 { return (after[k] - before[k]) / float64(max(rounds, 1)) }
	var out []Figure
	for _, res := range consistentResults {
		out = append(out, Figure{"hub consistent reads of the objects a round, behind endpoints: " + res, per(res), ""})
	}
	for _, q := range []float64{.5, .9, .99} {
		out = append(out, Figure{fmt.Sprintf("hub consistent read wait of the objects, p%g, at most", q*100), waitQuantile(before, after, consistentWaitBounds, q), "s"})
	}
	return append(out,
		Figure{"hub questions to kube-apiserver for its version a round (LIST limit 1)", per("questions"), ""},
		Figure{"hub progress probes a round (short WATCH until a bookmark)", per("probes"), ""})
}
