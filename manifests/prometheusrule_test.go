package manifests

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nodeproxy/nodeproxy/test/prometheus"
)

const (
	shippedRules = "overlays/prometheus/prometheusrule.yaml"
	// ruleTests are promtool's unit tests of the shipped rules; they name
	// the rule file ruleFileName, which the test writes beside a copy.
	ruleTests    = "testdata/prometheusrule-tests.yaml"
	ruleFileName = "nodeproxy.rules.yaml"
)

// TestShippedAlertsPassPromtool extracts the rules from the shipped
// PrometheusRule, as the Prometheus Operator hands them to Prometheus,
// and runs promtool check rules and promtool test rules on them. Without
// promtool it fails, naming the package to install.
func TestShippedAlertsPassPromtool(t *testing.T) {
	bins, err := prometheus.Tools()
	if err != nil {
		t.Fatal(err)
	}
	rules, _, err := prometheus.Rules(shippedRules)
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(ruleTests)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ruleFileName), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tests.yaml"), tests, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := bins.RunPromtool(ctx, dir, nil, "check", "rules", ruleFileName)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "WARNING") {
		t.Errorf("promtool check rules warns:\n%s", out)
	}
	if out, err := bins.RunPromtool(ctx, dir, nil, "test", "rules", "tests.yaml"); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("%s", out)
	}
}

// ruleTestFile is the part of promtool's unit test file this test reads.
type ruleTestFile struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			EvalTime  string           `json:"eval_time"`
			Alertname string           `json:"alertname"`
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
		PromQLExprTest []struct {
			Expr       string           `json:"expr"`
			EvalTime   string           `json:"eval_time"`
			ExpSamples []map[string]any `json:"exp_samples"`
		} `json:"promql_expr_test"`
	} `json:"tests"`
}

// TestEveryAlertIsUnitTested: promtool passes a file with no test of an
// alert, so this test holds the file to one per alert: tests named after
// it that, between them, show it firing only once its for: has passed
// (an evaluation with it firing at or after for:, and, in the same test,
// one less than for: earlier with it silent), and silent on a healthy series and
// on a short blip (named so; with a for:, the blip pending in ALERTS, so
// that the for: is what keeps it silent).
func TestEveryAlertIsUnitTested(t *testing.T) {
	_, alerts, err := prometheus.Rules(shippedRules)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(ruleTests)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleTestFile
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.RuleFiles) != 1 || f.RuleFiles[0] != ruleFileName {
		t.Errorf("%s: rule_files %v, want [%s] (what the test writes)", ruleTests, f.RuleFiles, ruleFileName)
	}
	known := map[string]bool{}
	for _, a := range alerts {
		known[a.Name] = true
	}
	for _, tc := range f.Tests {
		for _, art := range tc.AlertRuleTest {
			if !known[art.Alertname] {
				t.Errorf("test %q: alert %s is not in %s", tc.Name, art.Alertname, shippedRules)
			}
		}
	}
	for _, a := range alerts {
		t.Run(a.Name, func(t *testing.T) {
			forDur := duration(t, a.For)
			var names string
			var firesAfterFor, silentBeforeFor, blipPending bool
			pending := regexp.MustCompile(`ALERTS\{alertname="` + a.Name + `", alertstate="pending"\}`)
			for _, tc := range f.Tests {
				if !strings.HasPrefix(tc.Name, a.Name+" ") {
					continue
				}
				names += tc.Name + "\n"
				var silent, firing []time.Duration
				for _, art := range tc.AlertRuleTest {
					if art.Alertname != a.Name {
						t.Errorf("test %q evaluates %s: an alert's tests are named after it", tc.Name, art.Alertname)
						continue
					}
					at := duration(t, art.EvalTime)
					switch {
					case len(art.ExpAlerts) > 0 && at >= forDur:
						firesAfterFor = true
						firing = append(firing, at)
					case len(art.ExpAlerts) == 0:
						silent = append(silent, at)
					}
				}
				// Silent less than for: before it fires, in the same
				// series: it waited.
				for _, f := range firing {
					for _, s := range silent {
						if s < f && f-s < forDur {
							silentBeforeFor = true
						}
					}
				}
				for _, pt := range tc.PromQLExprTest {
					if pending.MatchString(pt.Expr) && len(pt.ExpSamples) > 0 {
						blipPending = true
					}
				}
			}
			if names == "" {
				t.Fatalf("no test in %s is named after %s", ruleTests, a.Name)
			}
			if !firesAfterFor {
				t.Errorf("no test shows %s firing at or after its for: (%s)", a.Name, a.For)
			}
			if !strings.Contains(names, "healthy") || !strings.Contains(names, "blip") {
				t.Errorf("the tests of %s do not say which series are healthy and which a blip:\n%s", a.Name, names)
			}
			if forDur > 0 && (!silentBeforeFor || !blipPending) {
				t.Errorf("%s has for: %s, but no test shows it silent before then (%v) or a blip pending in ALERTS (%v)", a.Name, a.For, silentBeforeFor, blipPending)
			}
		})
	}
}

// TestEveryAlertIsDocumented: docs/operations.md has a section per alert
// (what it means, what to do) under the anchor its runbook_url names.
func TestEveryAlertIsDocumented(t *testing.T) {
	_, alerts, err := prometheus.Rules(shippedRules)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		heading := regexp.MustCompile(`(?m)^#+ ` + a.Name + `\n\n\S`)
		if !heading.Match(docs) {
			t.Errorf("docs/operations.md has no section headed %s", a.Name)
		}
		want := "https://github.com/nodeproxy/nodeproxy/blob/main/docs/operations.md#" + strings.ToLower(a.Name)
		if got := a.Annotations["runbook_url"]; got != want {
			t.Errorf("%s: runbook_url %q, want %q", a.Name, got, want)
		}
	}
}

func duration(t *testing.T, s string) time.Duration {
	t.Helper()
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("duration %q: %v", s, err)
	}
	return d
}
