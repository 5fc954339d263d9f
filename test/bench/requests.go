package bench

import (
	"maps"
	"math"
	"slices"
	"strings"
)

// requestCounts are kube-apiserver's requests by "VERB resource" (and
// "/subresource"), from its apiserver_request_total: what a round asked
// of it, whoever asked.
type requestCounts map[string]float64

func requestsIn(m Metrics) requestCounts {
	return countsBy(m, "apiserver_request_total", func(l map[string]string) string {
		resource := l["resource"]
		if resource == "" {
			return "" // non-resource paths: /metrics, /healthz
		}
		if l["subresource"] != "" {
			resource += "/" + l["subresource"]
		}
		return l["verb"] + " " + resource
	})
}

// dispatchedByFlowSchema are the requests kube-apiserver's API Priority
// and Fairness dispatched so far (apiserver_flowcontrol_dispatched_requests_total),
// by "flow schema <name>": who asked, as the flow schemas tell users
// apart (system-nodes, service-accounts, global-default, exempt, ...).
func dispatchedByFlowSchema(m Metrics) requestCounts {
	return countsBy(m, "apiserver_flowcontrol_dispatched_requests_total", func(l map[string]string) string {
		return "flow schema " + l["flow_schema"]
	})
}

// countsBy sums the counter (or gauge) family name of m by the key each sample's
// labels give it; a sample keyed "" is left out.
func countsBy(m Metrics, name string, key func(labels map[string]string) string) requestCounts {
	out := requestCounts{}
	f := m[name]
	if f == nil {
		return out
	}
	for _, s := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range s.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if k := key(labels); k != "" {
			out[k] += s.GetCounter().GetValue() + s.GetGauge().GetValue()
		}
	}
	return out
}

// minus is c less before, key by key.
func (c requestCounts) minus(before requestCounts) requestCounts {
	out := requestCounts{}
	for k, v := range c {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// medianDifference is, key by key, the median over the pairs of the
// mounting round's count less the bare round's.
func medianDifference(pairs [][2]requestCounts) requestCounts {
	keys := map[string]bool{}
	for _, p := range pairs {
		for k := range p[0] {
			keys[k] = true
		}
		for k := range p[1] {
			keys[k] = true
		}
	}
	out := requestCounts{}
	for k := range keys {
		var ds []float64
		for _, p := range pairs {
			ds = append(ds, p[1][k]-p[0][k])
		}
		if d := median(ds); d != 0 {
			out[k] = d
		}
	}
	return out
}

// sortedKeys are c's keys, the largest count first.
func (c requestCounts) sortedKeys() []string {
	keys := slices.Collect(maps.Keys(c))
	slices.SortFunc(keys, func(a, b string) int {
		if c[a] != c[b] {
			if math.Abs(c[a]) > math.Abs(c[b]) {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return keys
}

// total is every request counted.
func (c requestCounts) total() float64 {
	var n float64
	for _, v := range c {
		n += v
	}
	return n
}

// reads are the lists and watches counted: what a client's informers
// ask for when they start over.
func (c requestCounts) reads() float64 {
	var n float64
	for k, v := range c {
		if strings.HasPrefix(k, "LIST ") || strings.HasPrefix(k, "WATCH ") {
			n += v
		}
	}
	return n
}

// sideBySide names counts by verb and resource as figures, direct's then
// fronted's, each "<prefix>, <way>: <VERB resource>". A key is named on
// both sides when either side counts one or more of it; less is noise.
func sideBySide(prefix string, direct, fronted requestCounts) []Figure {
	keys := map[string]bool{}
	for _, c := range []requestCounts{direct, fronted} {
		for k, n := range c {
			if math.Abs(n) >= 1 {
				keys[k] = true
			}
		}
	}
	var out []Figure
	for _, side := range []struct {
		way    string
		counts requestCounts
	}{{"direct", direct}, {"behind endpoints", fronted}} {
		for _, k := range side.counts.sortedKeys() {
			if keys[k] {
				out = append(out, Figure{prefix + ", " + side.way + ": " + k, side.counts[k], ""})
			}
		}
	}
	return out
}
