package main

import (
	"bytes"
	"context"
	"flag"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// TestDemoRunsToTheEnd runs `make demo DEMOFLAGS=--exit`'s code, every
// step, with a smaller comparison than the default (2 kubelets with 4
// objects each over 10 s windows, not 6 with 50 over 15 s: the test runs
// beside other packages' tests), and checks what it says of kube-apiserver's long-running requests from the
// nodes and that it ends on its table.
func TestDemoRunsToTheEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// The hub, the lean endpoint and its Pod API's checks, side by side
	// as make build lays them out in bin/.
	dir := t.TempDir()
	for _, name := range []string{"nodeproxy", "nodeproxy-node", "nodeproxy-node-podadmit"} {
		if _, err := controlplane.BuildCommand(ctx, dir, name); err != nil {
			t.Fatal(err)
		}
	}
	o, err := parseFlags(flag.NewFlagSet("demo", flag.ContinueOnError), []string{"--exit", "--nodeproxy=" + filepath.Join(dir, "nodeproxy"),
		"--compare-nodes=2", "--compare-pods=1", "--compare-objects=4", "--compare-window=10s"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	began := time.Now()
	err = run(ctx, &out, o)
	t.Logf("the demo ran %s:\n%s", time.Since(began).Round(time.Second), out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`Ctrl-C stops it`),
		regexp.MustCompile(`long-running requests from the three nodes\n    0 \(`),
		regexp.MustCompile(`web-0 Running with its files [0-9.]+ s later, from node-a's copy`),
		regexp.MustCompile(`the pod is handed over`),
		regexp.MustCompile(`long-running requests on kube-apiserver from the kubelets +[1-9][0-9]* +0\n`),
		regexp.MustCompile(`==> [0-9:]+ Stopping`),
	} {
		if !want.MatchString(out.String()) {
			t.Errorf("the demo's output has no match for %q", want)
		}
	}
}

// TestDemoRefusesBadFlags names every bad flag at once.
func TestDemoRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--for=-1s", "extra"}, []string{"--for must not be negative", `unexpected argument "extra"`}},
		{[]string{"--exit", "--for=1m"}, []string{"--exit and --for both"}},
		{[]string{"--compare-nodes=0", "--compare-objects=-1", "--compare-window=1s"}, []string{"--compare-nodes must be positive", "--compare-objects must be positive", "--compare-window must be at least 5s"}},
	} {
		_, err := parseFlags(flag.NewFlagSet("demo", flag.ContinueOnError), tc.args)
		if err == nil {
			t.Errorf("%v: accepted", tc.args)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v, want it to say %q", tc.args, err, w)
			}
		}
	}
	if _, err := parseFlags(flag.NewFlagSet("demo", flag.ContinueOnError), []string{"--exit"}); err != nil {
		t.Errorf("--exit: %v", err)
	}
}
