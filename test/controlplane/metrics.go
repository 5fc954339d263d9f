package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
)

// Metrics are one scrape of a /metrics endpoint, by family name. The
// harness's tests read kube-apiserver's with them, and nodeproxy-bench
// every server's.
type Metrics map[string]*dto.MetricFamily

// Sum adds the family's samples (gauges and counters) whose labels
// include every pair of match.
func (m Metrics) Sum(name string, match ...string) float64 {
	var sum float64
	f := m[name]
	if f == nil {
		return 0
	}
next:
	for _, s := range f.GetMetric() {
		for i := 0; i+1 < len(match); i += 2 {
			if labelValue(s, match[i]) != match[i+1] {
				continue next
			}
		}
		switch {
		case s.Gauge != nil:
			sum += s.GetGauge().GetValue()
		case s.Counter != nil:
			sum += s.GetCounter().GetValue()
		case s.Untyped != nil:
			sum += s.GetUntyped().GetValue()
		}
	}
	return sum
}

// labelValue is the sample's value of label name, "" if it has none: the
// exposition format's own reading of a missing label.
func labelValue(s *dto.Metric, name string) string {
	for _, l := range s.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Scrape reads url's Prometheus text exposition with client.
func Scrape(ctx context.Context, client *http.Client, url string) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("scrape %s: %s: %s", url, resp.Status, body)
	}
	m, err := parseMetrics(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return m, nil
}

// ScrapeAPIServer reads kube-apiserver's /metrics through client, which
// keeps the path a kubeconfig's server may carry (a proxy's
// https://host/k8s/clusters/c-1) and its credentials.
func ScrapeAPIServer(ctx context.Context, client rest.Interface) (Metrics, error) {
	raw, err := client.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("scrape kube-apiserver's /metrics: %w", err)
	}
	m, err := parseMetrics(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("scrape kube-apiserver's /metrics: %w", err)
	}
	return m, nil
}

func parseMetrics(r io.Reader) (Metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	return Metrics(families), nil
}

// LongRunning is one series of kube-apiserver's
// apiserver_longrunning_requests gauge: the requests of that kind open
// now (watches, and proxy, exec, attach and port-forward connections).
// The gauge does not say who made them: a test that wants "from nodes"
// reads it before and after the nodes' clients start (Minus).
type LongRunning struct {
	Verb        string // WATCH, CONNECT, ...
	Group       string // "" for the core group
	Version     string
	Resource    string
	Subresource string
	Scope       string // cluster, namespace or resource
	Component   string // apiserver
}

// LongRunningRequests are the gauge's series and their values.
type LongRunningRequests map[LongRunning]int

// LongRunningIn reads apiserver_longrunning_requests out of m.
func LongRunningIn(m Metrics) LongRunningRequests {
	out := LongRunningRequests{}
	for _, s := range m["apiserver_longrunning_requests"].GetMetric() {
		key := LongRunning{
			Verb:        labelValue(s, "verb"),
			Group:       labelValue(s, "group"),
			Version:     labelValue(s, "version"),
			Resource:    labelValue(s, "resource"),
			Subresource: labelValue(s, "subresource"),
			Scope:       labelValue(s, "scope"),
			Component:   labelValue(s, "component"),
		}
		out[key] += int(s.GetGauge().GetValue())
	}
	return out
}

// ReadLongRunningRequests scrapes kube-apiserver through client (an admin's
// REST client) for apiserver_longrunning_requests.
func ReadLongRunningRequests(ctx context.Context, client rest.Interface) (LongRunningRequests, error) {
	m, err := ScrapeAPIServer(ctx, client)
	if err != nil {
		return nil, err
	}
	return LongRunningIn(m), nil
}

// Count sums the series whose verb and resource are given ("" matches
// any): Count("WATCH", "services") is every open watch of Services,
// namespaced or not.
func (l LongRunningRequests) Count(verb, resource string) int {
	n := 0
	for k, v := range l {
		if (verb == "" || k.Verb == verb) && (resource == "" || k.Resource == resource) {
			n += v
		}
	}
	return n
}

// Minus is l less before, series by series, keeping only those that
// changed: what opened (or closed) in between.
func (l LongRunningRequests) Minus(before LongRunningRequests) LongRunningRequests {
	out := LongRunningRequests{}
	for k, v := range l {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	for k, v := range before {
		if _, ok := l[k]; !ok && v != 0 {
			out[k] = -v
		}
	}
	return out
}

// ByVerbResource sums l by "<verb> <resource>[/<subresource>]", the key
// test logs and benchmark reports print.
func (l LongRunningRequests) ByVerbResource() map[string]int {
	out := map[string]int{}
	for k, v := range l {
		key := k.Verb + " " + k.Resource
		if k.Subresource != "" {
			key += "/" + k.Subresource
		}
		out[key] += v
	}
	return out
}

// String lists l by verb and resource, sorted, signs shown: for logs.
func (l LongRunningRequests) String() string {
	by := l.ByVerbResource()
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(by)) {
		parts = append(parts, fmt.Sprintf("%s %+d", k, by[k]))
	}
	return fmt.Sprint(parts)
}
