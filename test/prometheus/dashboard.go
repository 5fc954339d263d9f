package prometheus

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// PanelQuery is one query of a Grafana dashboard panel.
type PanelQuery struct {
	Panel string
	RefID string
	Expr  string
}

// DashboardQueries returns every Prometheus query of the Grafana dashboard
// at path, panels inside rows included. A dashboard with template
// variables in its queries other than the data source is refused: the
// test would have to know their values.
func DashboardQueries(path string) ([]PanelQuery, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []PanelQuery
	var walk func([]json.RawMessage) error
	walk = func(ps []json.RawMessage) error {
		for _, rawPanel := range ps {
			var p panel
			if err := json.Unmarshal(rawPanel, &p); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			for _, t := range p.Targets {
				if strings.Contains(t.Expr, "$") {
					return fmt.Errorf("%s: panel %q query %s: template variables are not supported here", path, p.Title, t.RefID)
				}
				if t.Expr != "" {
					out = append(out, PanelQuery{Panel: p.Title, RefID: t.RefID, Expr: t.Expr})
				}
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no panel queries", path)
	}
	return out, nil
}
