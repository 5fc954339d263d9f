package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nodeproxy/nodeproxy/test/workload"
)

// TestScenariosInProcess runs every in-process scenario on a small
// cluster under the race detector: each must measure something, and an
// interrupted run must come back marked partial with what it had.
func TestScenariosInProcess(t *testing.T) {
	shape := workload.Shape{Nodes: 10, PodsPerNode: 4, Namespaces: 3, UniqueSecretsPerPod: 1, UniqueConfigMapsPerPod: 1,
		UniquePVCsPerPod: 1, SharedSecretsPerPod: 1, SharedSecretsPerNamespace: 2, AttachmentsPerNode: 1, Seed: 1}
	c, err := workload.Generate(shape)
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{Shape: shape, Cluster: c, PhaseDuration: 50 * time.Millisecond,
		Watch: WatchLoad{Nodes: 5, ChannelsPerNode: 3, ObjectSize: 64, Updates: 20}, RevokeRate: 1000}
	// Each scenario is interrupted once it announces this phase, which
	// would run an hour.
	longPhase := map[string]string{"authz": "in-process decisions", "graph": "pod writes", "fanout": "single updates", "revoke": "deleting", "bulkget": "a request per object"}
	inProcess, err := Lookup(nil, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range inProcess {
		t.Run(s.Name, func(t *testing.T) {
			r, err := s.Run(context.Background(), env)
			if err != nil {
				t.Fatal(err)
			}
			if r.Partial || len(r.Figures) == 0 || len(r.Latencies) == 0 {
				t.Fatalf("%+v", r)
			}
			for _, l := range r.Latencies {
				if l.Count == 0 || l.P50 <= 0 || l.P99 < l.P50 || l.Max < l.P99 {
					t.Errorf("latency %+v", l)
				}
			}

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			interrupted := *env
			interrupted.PhaseDuration = time.Hour
			interrupted.RevokeRate = 1 // seconds per deletion
			interrupted.Progress = cancelOn{longPhase[s.Name], cancel}
			r, err = s.Run(ctx, &interrupted)
			if err == nil || r == nil || !r.Partial {
				t.Errorf("interrupted: %+v, %v; want a partial result and the cancellation", r, err)
			}
		})
	}
	if _, err := Lookup([]string{"authz", "nosuch"}, false); err == nil || !strings.Contains(err.Error(), "known scenarios are authz, graph, bulkget, fanout, revoke, apiserver") {
		t.Errorf("unknown scenario: %v", err)
	}
	if _, err := Lookup([]string{"bulkget", "graph"}, true); err == nil || !strings.Contains(err.Error(), "scenario graph measures nodeproxy in this process and takes no --kubeconfig: against a cluster, run bulkget, fanout, revoke, apiserver") {
		t.Errorf("in-process scenario against a cluster: %v", err)
	}
	if _, err := Lookup([]string{"kubelets"}, true); err == nil || !strings.Contains(err.Error(), "scenario kubelets runs programs on this machine against a local control plane and takes no --kubeconfig") {
		t.Errorf("kubelets against a cluster: %v", err)
	}
	against, err := Lookup(nil, true)
	var names []string
	for _, s := range against {
		names = append(names, s.Name)
	}
	if err != nil || strings.Join(names, ",") != "bulkget,fanout,revoke,apiserver" {
		t.Errorf("default scenarios against a cluster: %v, %v; want bulkget, fanout, revoke, apiserver", names, err)
	}
}

// cancelOn is a progress writer that cancels once a line contains marker,
// a moment after: the phase has started.
type cancelOn struct {
	marker string
	cancel context.CancelFunc
}

func (c cancelOn) Write(p []byte) (int, error) {
	if strings.Contains(string(p), c.marker) {
		time.AfterFunc(100*time.Millisecond, c.cancel)
	}
	return len(p), nil
}
