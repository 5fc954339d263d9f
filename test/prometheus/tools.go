package prometheus

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Package is the Debian package that installs both binaries; .ci/run
// installs it as it installs make.
const Package = "prometheus"

// Binaries are the paths of the Prometheus server and promtool.
type Binaries struct {
	Prometheus, Promtool string
}

// Tools finds prometheus and promtool on PATH. Its error names the
// package to install: a test that needs them fails with it, never skips,
// so that a machine without them cannot pass `make test` unseen.
func Tools() (Binaries, error) {
	var b Binaries
	var missing []string
	for _, tool := range []struct {
		name string
		dst  *string
	}{{"prometheus", &b.Prometheus}, {"promtool", &b.Promtool}} {
		name, dst := tool.name, tool.dst
		path, err := exec.LookPath(name)
		if err != nil {
			missing = append(missing, name)
			continue
		}
		*dst = path
	}
	if len(missing) > 0 {
		return b, fmt.Errorf("%s not found on PATH: install the Debian package %q (apt-get install -y %s, as .ci/run does), which provides /usr/bin/prometheus and /usr/bin/promtool",
			strings.Join(missing, " and "), Package, Package)
	}
	return b, nil
}

// RunPromtool runs promtool with args in dir and returns its combined
// output; a non-zero exit is an error carrying the output.
func (b Binaries) RunPromtool(ctx context.Context, dir string, stdin []byte, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, b.Promtool, args...)
	cmd.Dir = dir
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("promtool %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
