package prometheus

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// Alert is one alerting rule of a PrometheusRule.
type Alert struct {
	Group       string
	Name        string
	Expr        string
	For         string
	Labels      map[string]string
	Annotations map[string]string
}

// Rules reads the PrometheusRule at path and returns its spec.groups as a
// Prometheus rule file (what the Prometheus Operator mounts for
// Prometheus: `groups:` and the groups unchanged), and its alerts. The
// groups are copied as parsed, not rewritten: promtool checks the rules
// as shipped.
func Rules(path string) (ruleFile []byte, alerts []Alert, err error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var generic struct {
		Kind string `json:"kind"`
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &generic); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if generic.Kind != "PrometheusRule" {
		return nil, nil, fmt.Errorf("%s: kind %q, want PrometheusRule", path, generic.Kind)
	}
	if len(generic.Spec.Groups) == 0 {
		return nil, nil, fmt.Errorf("%s: no spec.groups", path)
	}
	if ruleFile, err = yaml.Marshal(map[string]any{"groups": generic.Spec.Groups}); err != nil {
		return nil, nil, err
	}
	var typed struct {
		Spec struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Alert       string            `json:"alert"`
					Expr        string            `json:"expr"`
					For         string            `json:"for"`
					Labels      map[string]string `json:"labels"`
					Annotations map[string]string `json:"annotations"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &typed); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, g := range typed.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue // a recording rule
			}
			alerts = append(alerts, Alert{Group: g.Name, Name: r.Alert, Expr: r.Expr, For: r.For, Labels: r.Labels, Annotations: r.Annotations})
		}
	}
	return ruleFile, alerts, nil
}
