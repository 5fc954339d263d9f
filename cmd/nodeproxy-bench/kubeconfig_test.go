package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestBenchAgainstAKubeconfig runs `nodeproxy-bench --kubeconfig` as an
// operator would against a cluster fronted by nodeproxy: the harness's,
// with nodeproxy serving and registered as the bulk.k8s.io APIService.
// Without scenarios named it runs those that take a cluster; the ones
// that measure nodeproxy in-process are refused by name.
func TestBenchAgainstAKubeconfig(t *testing.T) {
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	np, err := cp.StartNodeproxy(ctx, hub, ports[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(np.Process.Stop)
	if err := cp.RegisterAPIService(ctx, testserver.Manifest(t, "apiservice.yaml"), np.Port); err != nil {
		t.Fatal(err)
	}
	kubeconfig := testserver.AdminKubeconfig(t, cp, "")

	out, code := run(t, 3*time.Minute, "--kubeconfig="+kubeconfig, "--output=json", "--watch-nodes=3", "--channels-per-node=3",
		"--object-size=64", "--phase-duration=10ms", "--updates=5", "--revoke-rate=50")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	var report struct {
		Shape   *struct{}
		Results []struct {
			Scenario string
			Figures  []struct{ Name string }
		}
	}
	decodeReport(t, out, &report)
	if report.Shape != nil {
		t.Error("reported a generated cluster's shape, though nothing ran in-process")
	}
	var scenarios []string
	for _, r := range report.Results {
		scenarios = append(scenarios, r.Scenario)
		if len(r.Figures) == 0 {
			t.Errorf("%s measured nothing", r.Scenario)
		}
	}
	if strings.Join(scenarios, ",") != "bulkget,fanout,revoke,apiserver" {
		t.Errorf("scenarios %v, want bulkget,fanout,revoke,apiserver", scenarios)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--kubeconfig=" + kubeconfig, "authz"}, "scenario authz measures nodeproxy in this process and takes no --kubeconfig"},
		{[]string{"--kubeconfig=/nonexistent/kubeconfig"}, "--kubeconfig: stat /nonexistent/kubeconfig"},
		{[]string{"--nodeproxy=/nonexistent/nodeproxy", "apiserver"}, "--nodeproxy: stat /nonexistent/nodeproxy"},
	} {
		out, code := run(t, time.Minute, tc.args...)
		if code == 0 || !strings.Contains(out, tc.want) {
			t.Errorf("nodeproxy-bench %v: exit %d, want non-zero and %q in:\n%s", tc.args, code, tc.want, out)
		}
	}
}
