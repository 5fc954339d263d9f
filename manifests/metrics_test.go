package manifests

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// nodeproxyMetric matches a nodeproxy series name in an alert or a
// dashboard query.
var nodeproxyMetric = regexp.MustCompile(`\bnodeproxy_[a-z_]+`)

// metricDefinition matches the name parts of a metric defined in Go with
// k8s.io/component-base/metrics options, on one line or several.
var metricDefinition = regexp.MustCompile(`Namespace:\s*"nodeproxy",\s*Subsystem:\s*"([a-z_]+)",\s*Name:\s*"([a-z_]+)"`)

// collectedDefinition matches a metric a custom collector reports, whose
// description names it whole.
var collectedDefinition = regexp.MustCompile(`NewDesc\(\s*"(nodeproxy_[a-z_]+)"`)

// TestAlertsAndDashboardUseMetricsThatExist: every nodeproxy_* series the
// PrometheusRule and the Grafana dashboard query is one the code defines,
// so that renaming a metric without them fails here rather than leaving
// an alert that can never fire.
func TestAlertsAndDashboardUseMetricsThatExist(t *testing.T) {
	defined := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range metricDefinition.FindAllStringSubmatch(string(src), -1) {
			defined["nodeproxy_"+m[1]+"_"+m[2]] = true
		}
		for _, m := range collectedDefinition.FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(defined) < 10 {
		t.Fatalf("found only %d metric definitions in the code: the pattern no longer matches how metrics are defined", len(defined))
	}
	for _, file := range []string{"overlays/prometheus/prometheusrule.yaml", "overlays/prometheus/grafana-dashboard.json"} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, used := range nodeproxyMetric.FindAllString(string(raw), -1) {
			series := used
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				series = strings.TrimSuffix(series, suffix)
			}
			if !defined[series] {
				t.Errorf("%s queries %s, which no metric in the code defines", file, used)
			}
		}
	}
}
