package bench

import (
	"context"
	"testing"
	"time"
)

// TestKubeletsScenario runs the kubelets scenario small: two hollow
// kubelets, straight on kube-apiserver and then behind node endpoints
// run from the binary under test, one pair of rounds each. The rounds
// are shorter than their work, so they run as fast as it goes and are
// counted as overrun.
func TestKubeletsScenario(t *testing.T) {
	env := &Env{Kubelets: KubeletLoad{Nodes: 2, PodsPerNode: 1, ObjectsPerPod: 2, Pairs: 1, Round: time.Second, Idle: time.Second}}
	r, err := runKubelets(context.Background(), env, localTarget(t, startNodeproxy(t)))
	if err != nil {
		t.Fatal(err)
	}
	figure := func(name string) float64 {
		for _, f := range r.Figures {
			if f.Name == name {
				return f.Value
			}
		}
		t.Fatalf("no figure %q in %+v", name, r.Figures)
		return 0
	}
	// One secret and one configmap per pod, a watch each.
	if got := figure("their watches on kube-apiserver, direct"); got != 4 {
		t.Errorf("watches straight on kube-apiserver: %v, want 4", got)
	}
	if got := figure("their watches on kube-apiserver, behind endpoints"); got != 0 {
		t.Errorf("watches on kube-apiserver behind endpoints: %v, want 0", got)
	}
	for _, name := range []string{
		"kube-apiserver CPU a round, bare pods, direct", "kube-apiserver CPU a round, mounting pods, direct",
		"kube-apiserver CPU a round, bare pods, behind endpoints", "kube-apiserver CPU a round, mounting pods, behind endpoints",
		"endpoint RSS per node, mean",
	} {
		if got := figure(name); got <= 0 {
			t.Errorf("%s not measured: %v", name, got)
		}
	}
	// Four rounds of a second each cannot hold pods coming up and going.
	if got := figure("rounds longer than --kubelet-round"); got != 4 {
		t.Errorf("rounds overrun: %v, want all 4", got)
	}
	for _, l := range r.Latencies {
		if l.Count != 2 {
			t.Errorf("%s: %d samples, want one per pod's secret file (2)", l.Name, l.Count)
		}
	}
}
