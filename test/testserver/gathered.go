package testserver

import (
	"testing"

	"k8s.io/component-base/metrics/legacyregistry"
)

// Gathered sums the counters and gauges of family name in this process's
// legacy registry whose labels include every one of labels: the series of
// a hub and of node endpoints that run in the test's process, read
// without their /metrics (which asks kube-apiserver who may read it, or
// is the kubelet's port, both closed to a test that took the credential
// away).
func Gathered(t testing.TB, name string, labels map[string]string) float64 {
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
	metrics:
		for _, m := range f.GetMetric() {
			matched := 0
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok {
					if v != l.GetValue() {
						continue metrics
					}
					matched++
				}
			}
			if matched != len(labels) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}
