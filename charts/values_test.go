package charts

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
)

// TestChartLints runs Helm's linter (helm lint: Chart.yaml, the values
// against values.schema.json, every template rendered and parsed) with
// the values of each kustomization's equivalent; a warning fails as an
// error does.
func TestChartLints(t *testing.T) {
	for _, e := range equivalents {
		t.Run(e.name, func(t *testing.T) {
			result := lint.RunAll(chartDir, e.values(t), namespace, lint.WithKubeVersion(kubeVersion))
			for _, m := range result.Messages {
				if m.Severity >= support.WarningSev {
					t.Error(m)
				} else {
					t.Log(m)
				}
			}
		})
	}
}

// TestBadValuesAreRefusedNamingTheValue renders each values file under
// testdata/bad-values, as `helm install -f` would: each must be refused
// before anything is applied, by the schema (a wrong type, an unknown
// key) or by the chart's validate.yaml (settings that conflict), with a
// message that names the value.
func TestBadValuesAreRefusedNamingTheValue(t *testing.T) {
	cases := map[string][]string{
		"wrong-type.yaml":               {"/hub/replicas", "want integer"},
		"unknown-key.yaml":              {"/hub", "'replica' not allowed"},
		"unknown-section.yaml":          {"'monitoring' not allowed"},
		"bad-duration.yaml":             {"/node/grace", "does not match pattern"},
		"webhook-without-ca.yaml":       {"authorizationWebhook.certificateAuthority", "authorizationWebhook.certificateAuthorityData", "both empty"},
		"webhook-two-cas.yaml":          {"authorizationWebhook.certificateAuthority and authorizationWebhook.certificateAuthorityData are both set"},
		"no-ca-bundle.yaml":             {"certManager.enabled is false", "apiService.caBundle is empty"},
		"gomemlimit-without-limit.yaml": {"hub.goMemLimit", "hub.resources.limits.memory"},
		"sharding-no-replicas.yaml":     {"/sharding/replicas", "minimum"},
	}
	files, err := filepath.Glob("testdata/bad-values/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(cases) {
		t.Errorf("testdata/bad-values holds %d files, this test expects %d: give each its message", len(files), len(cases))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			want, ok := cases[filepath.Base(f)]
			if !ok {
				t.Fatal("no expected message")
			}
			_, err := renderChart(t, valuesFile(t, f))
			if err == nil {
				t.Fatal("the chart renders it")
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q:\n%v", w, err)
				}
			}
			t.Log(err)
		})
	}
}

// TestValuesAndSchemaListTheSameKeys: values.yaml documents every value
// the schema admits, with its default, and the schema admits every value
// values.yaml sets (additionalProperties false everywhere), so that
// neither lists a value the other does not.
func TestValuesAndSchemaListTheSameKeys(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var root schemaNode
	if err := json.Unmarshal(raw, &root); err != nil {
		t.Fatal(err)
	}
	var missing func(prefix string, s schemaNode, vals map[string]any)
	missing = func(prefix string, s schemaNode, vals map[string]any) {
		if s.AdditionalProperties == nil || *s.AdditionalProperties {
			t.Errorf("the schema admits unknown keys under %q", prefix)
		}
		for name, sub := range s.Properties {
			v, ok := vals[name]
			if !ok && !unsetByDefault[prefix+name] {
				t.Errorf("values.yaml has no default for %s%s", prefix, name)
				continue
			}
			if m, isMap := v.(map[string]any); isMap && sub.Properties != nil {
				missing(prefix+name+".", sub, m)
			}
		}
		for name := range vals {
			if _, ok := s.Properties[name]; !ok {
				t.Errorf("the schema does not list %s%s", prefix, name)
			}
		}
	}
	missing("", root, valuesFile(t, filepath.Join(chartDir, "values.yaml")))
}

// unsetByDefault are the values the schema admits that values.yaml
// leaves out, each with its comment there: the base sets no memory limit
// (values-production.yaml does).
var unsetByDefault = map[string]bool{"hub.resources.limits": true}

// schemaNode is what TestValuesAndSchemaListTheSameKeys reads of an
// object's schema. additionalProperties is a bool here or a schema (maps
// of free keys, such as hub.nodeSelector, whose properties are nil).
type schemaNode struct {
	Properties           map[string]schemaNode
	AdditionalProperties *bool
}

func (s *schemaNode) UnmarshalJSON(b []byte) error {
	var raw struct {
		Properties           map[string]schemaNode
		AdditionalProperties json.RawMessage
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	s.Properties = raw.Properties
	var closed bool
	if json.Unmarshal(raw.AdditionalProperties, &closed) == nil {
		s.AdditionalProperties = &closed
	}
	return nil
}
