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
	out := requestCounts{}
	f := m["apiserver_request_total"]
	if f == nil {
		return out
	}
	for _, s := range f.GetMetric() {
		var verb, resource, sub string
		for _, l := range s.GetLabel() {
			switch l.GetName() {
			case "verb":
				verb = l.GetValue()
			case "resource":
				resource = l.GetValue()
			case "subresource":
				sub = l.GetValue()
			}
		}
		if resource == "" {
			continue // non-resource paths: /metrics, /healthz
		}
		if sub != "" {
			resource += "/" + sub
		}
		out[verb+" "+resource] += s.GetCounter().GetValue()
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
