package disk

import (
	"os"
	"testing"

	"k8s.io/component-base/metrics/testutil"
)

func TestMetricsCountSavesAndLoadsByResult(t *testing.T) {
	RegisterMetrics()
	count := func(loadResult string) float64 {
		v, err := testutil.GetCounterMetricValue(loads.WithLabelValues(loadResult))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	savesOK := func() float64 {
		v, err := testutil.GetCounterMetricValue(saves.WithLabelValues("ok"))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	s := openStore(t, nil)
	none, ok, corrupt, otherNode, savedBefore := count("none"), count("ok"), count("corrupt"), count("other_node"), savesOK()

	if _, err := s.Load(testNode, testCluster); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(snapshotOf(t, "pods=1", 3)); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := testutil.GetGaugeMetricValue(lastSaveBytes); v != float64(fi.Size()) {
		t.Errorf("last save bytes %v, file %d", v, fi.Size())
	}
	if _, err := s.Load(testNode, testCluster); err != nil {
		t.Fatal(err)
	}
	_, _ = s.Load("node-b", testCluster)
	if err := os.WriteFile(s.Path(), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _ = s.Load(testNode, testCluster)

	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"saves ok", savesOK(), savedBefore + 1},
		{"loads none", count("none"), none + 1},
		{"loads ok", count("ok"), ok + 1},
		{"loads other_node", count("other_node"), otherNode + 1},
		{"loads corrupt", count("corrupt"), corrupt + 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
}
