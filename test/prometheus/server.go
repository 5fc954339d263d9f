package prometheus

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// Server is a Prometheus server process on 127.0.0.1.
type Server struct {
	URL     string
	Process *controlplane.Process
	client  *http.Client
}

// Config is the part of prometheus.yml the tests set.
type Config struct {
	// ScrapeInterval is global.scrape_interval, also the rules'
	// evaluation interval.
	ScrapeInterval time.Duration
	// RuleFiles are paths of rule files to load.
	RuleFiles []string
	// ScrapeConfigs are scrape_configs entries.
	ScrapeConfigs []map[string]any
}

// Start writes cfg as dir/prometheus.yml and runs prometheus with its
// storage in dir, and returns once /-/ready answers. The caller stops the
// process.
func Start(ctx context.Context, bins Binaries, dir string, cfg Config) (*Server, error) {
	interval := cfg.ScrapeInterval.String()
	raw, err := yaml.Marshal(map[string]any{
		"global":         map[string]any{"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
		"rule_files":     cfg.RuleFiles,
		"scrape_configs": cfg.ScrapeConfigs,
	})
	if err != nil {
		return nil, err
	}
	config := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(config, raw, 0o600); err != nil {
		return nil, err
	}
	if out, err := bins.RunPromtool(ctx, dir, nil, "check", "config", config); err != nil {
		return nil, fmt.Errorf("the generated configuration:\n%s\n%w", raw, err)
	} else if strings.Contains(out, "WARNING") {
		return nil, fmt.Errorf("promtool check config warns on the generated configuration:\n%s\n%s", raw, out)
	}
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://127.0.0.1:" + strconv.Itoa(ports[0]), client: &http.Client{Timeout: 10 * time.Second}}
	s.Process, err = controlplane.StartProcess("prometheus", bins.Prometheus, []string{
		"--config.file=" + config,
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:" + strconv.Itoa(ports[0]),
		"--log.level=debug",
	}, filepath.Join(dir, "prometheus.log"))
	if err != nil {
		return nil, err
	}
	if err := controlplane.WaitReady(ctx, s.Process, s.client, s.URL+"/-/ready"); err != nil {
		s.Process.Stop()
		return nil, err
	}
	return s, nil
}

// Sample is one series of an instant query's answer.
type Sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// QueryError is Prometheus's refusal of a query (errorType bad_data for
// one that does not parse).
type QueryError struct {
	Type, Message string
}

func (e *QueryError) Error() string { return e.Type + ": " + e.Message }

// Query evaluates expr now (GET /api/v1/query) and returns its series: a
// vector's samples, or a scalar as one sample without labels.
func (s *Server) Query(ctx context.Context, expr string) ([]Sample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := s.get(ctx, "/api/v1/query?"+url.Values{"query": {expr}}.Encode(), &data); err != nil {
		return nil, err
	}
	switch data.ResultType {
	case "vector":
		var v []Sample
		return v, json.Unmarshal(data.Result, &v)
	case "scalar":
		var v [2]any
		return []Sample{{Value: v}}, json.Unmarshal(data.Result, &v)
	}
	return nil, fmt.Errorf("query %s: result type %s", expr, data.ResultType)
}

// Target is one active scrape target.
type Target struct {
	ScrapePool string            `json:"scrapePool"`
	ScrapeURL  string            `json:"scrapeUrl"`
	Labels     map[string]string `json:"labels"`
	Health     string            `json:"health"`
	LastError  string            `json:"lastError"`
	LastScrape time.Time         `json:"lastScrape"`
}

// Targets returns the active targets (GET /api/v1/targets).
func (s *Server) Targets(ctx context.Context) ([]Target, error) {
	var data struct {
		Active []Target `json:"activeTargets"`
	}
	return data.Active, s.get(ctx, "/api/v1/targets?state=active", &data)
}

// Rule is one loaded rule and how its last evaluation went.
type Rule struct {
	Name      string `json:"name"`
	Query     string `json:"query"`
	Type      string `json:"type"`
	Health    string `json:"health"`
	LastError string `json:"lastError"`
	State     string `json:"state"`
}

// Rules returns every loaded rule (GET /api/v1/rules).
func (s *Server) Rules(ctx context.Context) ([]Rule, error) {
	var data struct {
		Groups []struct {
			Rules []Rule `json:"rules"`
		} `json:"groups"`
	}
	if err := s.get(ctx, "/api/v1/rules", &data); err != nil {
		return nil, err
	}
	var out []Rule
	for _, g := range data.Groups {
		out = append(out, g.Rules...)
	}
	return out, nil
}

// get decodes the data of Prometheus's API answer at path into data.
func (s *Server) get(ctx context.Context, path string, data any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+path, nil)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var answer struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return fmt.Errorf("GET %s: %s: %.300s", path, resp.Status, body)
	}
	if answer.Status != "success" {
		return &QueryError{Type: answer.ErrorType, Message: answer.Error}
	}
	return json.Unmarshal(answer.Data, data)
}
