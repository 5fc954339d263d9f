package bench

import (
	"context"
	"fmt"
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
	}
	return out, nil
}

// consistencyFigures are the hub's counts over the side behind the
// endpoints, a round's worth (the idle period's counted in the last).
func consistencyFigures(before, after map[string]float64, rounds int) []Figure {
	per := func(k string) float64 { return (after[k] - before[k]) / float64(max(rounds, 1)) }
	var out []Figure
	for _, res := range consistentResults {
		out = append(out, Figure{"hub consistent reads of the objects a round, behind endpoints: " + res, per(res), ""})
	}
	return append(out,
		Figure{"hub questions to kube-apiserver for its version a round (LIST limit 1)", per("questions"), ""},
		Figure{"hub progress probes a round (short WATCH until a bookmark)", per("probes"), ""})
}
