package testserver

import (
	"testing"

	"k8s.io/component-base/metrics/legacyregistry"
)

// Gathered sums the counters and gauges of family name in the in-process
// registry that /metrics serves (a server Start runs is in the test's
// process) whose labels have the values given, as name, value pairs.
// Reading the registry rather than /metrics asks kube-apiserver nothing.
func Gathered(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	samples:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}
				if !found {
					continue samples
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}
