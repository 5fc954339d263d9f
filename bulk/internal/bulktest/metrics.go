package bulktest

import (
	"testing"

	"k8s.io/component-base/metrics/legacyregistry"
)

// CounterValue is the value of the counter name whose labels include
// labels, from the registry /metrics serves; 0 while it has not been
// counted.
func CounterValue(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			matched := 0
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v == l.GetValue() {
					matched++
				}
			}
			if matched == len(labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
