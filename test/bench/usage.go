package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
)

// Usage is what a process has consumed so far.
type Usage struct {
	// CPU is user plus system time since the process started.
	CPU time.Duration
	// RSS is its resident memory now, in bytes.
	RSS int64
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go supports (the kernel scales to it whatever
// its own HZ).
const clockTick = 10 * time.Millisecond

// ReadUsage reads pid's CPU time and resident memory from /proc.
func ReadUsage(pid int) (Usage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Usage{}, fmt.Errorf("process %d: %w", pid, err)
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// count fields after its closing one. utime and stime are fields 14
	// and 15, so the 12th and 13th after it.
	rest := string(stat)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return Usage{}, fmt.Errorf("process %d: /proc/%d/stat has %d fields after the name, want at least 13", pid, pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return Usage{}, fmt.Errorf("process %d: utime %q, stime %q in /proc/%d/stat", pid, f[11], f[12], pid)
	}
	u := Usage{CPU: time.Duration(utime+stime) * clockTick}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Usage{}, fmt.Errorf("process %d: %w", pid, err)
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return Usage{}, fmt.Errorf("process %d: VmRSS %q: %w", pid, v, err)
			}
			u.RSS = kb << 10
		}
	}
	return u, nil
}

// Metrics are one scrape of a /metrics endpoint, by family name.
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
			found := false
			for _, l := range s.GetLabel() {
				if l.GetName() == match[i] && l.GetValue() == match[i+1] {
					found = true
				}
			}
			if !found {
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
