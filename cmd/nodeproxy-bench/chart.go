package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodeproxy/nodeproxy/test/bench"
)

// validateChartPath checks that --chart's file can be written, so that a
// typo is refused before minutes of measurement rather than after them:
// its directory must exist and take a new file (tried with a scratch file,
// which also catches permissions and read-only mounts), and the path must
// not be a directory. "" (no chart) is valid.
func validateChartPath(path string) error {
	if path == "" {
		return nil
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("--chart %s: is a directory, want a file", path)
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("--chart %s: directory %s: %w", path, dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("--chart %s: %s is not a directory", path, dir)
	}
	probe, err := os.CreateTemp(dir, ".nodeproxy-bench-chart-*")
	if err != nil {
		return fmt.Errorf("--chart %s: cannot write in %s: %w", path, dir, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	return nil
}

// writeBenchChart writes the latency chart of results to path, when path
// is set. The SVG is rendered in memory first, so a run with nothing to
// chart leaves no empty or half-written file behind.
func writeBenchChart(path string, results []*bench.Result) error {
	if path == "" {
		return nil
	}
	var buf bytes.Buffer
	if err := bench.WriteChart(&buf, results); err != nil {
		return fmt.Errorf("--chart %s: %w", path, err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("--chart: %w", err)
	}
	return nil
}
