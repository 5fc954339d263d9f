package bench

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestNodeViewScenario runs the nodeview scenario small: two hollow
// kubelets, one pod of four objects each, one kubelet restarted with the
// control plane up and the other during a 15-second outage of
// kube-apiserver and the hub (this package's control plane: the hub is
// the test's own, and kube-apiserver is back before the test ends).
func TestNodeViewScenario(t *testing.T) {
	np := startNodeproxy(t)
	// The scenario replaces the hub's process when it brings the hub
	// back: stop whichever runs at the end.
	t.Cleanup(func() { np.Process.Stop() })
	env := &Env{NodeView: NodeViewLoad{Nodes: 2, PodsPerNode: 1, ObjectsPerPod: 4, Restarts: 1, Outage: 15 * time.Second, FillLog: 16}, Progress: os.Stderr}
	r, err := runNodeView(context.Background(), env, localTarget(t, np))
	if err != nil {
		t.Fatal(err)
	}
	figure := func(name string) float64 {
		t.Helper()
		for _, f := range r.Figures {
			if f.Name == name {
				return f.Value
			}
		}
		t.Fatalf("no figure %q in %+v", name, r.Figures)
		return 0
	}
	// A node behind a copy endpoint holds one channel for its view, and
	// one for each of its kubelet's watches the copy does not serve.
	if got, off := figure("channels and memory: hub channels per node, the copy"),
		figure("channels and memory: the kubelet's open watches per node, the copy: hub"); got != 1+off {
		t.Errorf("hub channels per node with the copy: %v, want 1 and the kubelet's %v watches on the hub", got, off)
	}
	// Without it, one per object and per type the kubelet watches.
	if got := figure("channels and memory: hub channels per node, a channel per object (--node-view=false)"); got < 4 {
		t.Errorf("hub channels per node without the copy: %v, want at least one per object (4)", got)
	}
	// Each side's nodes registered and ran a pod: the hub took in their
	// changes, counted before the logs were refilled (FillLog).
	for _, t2 := range []string{"a channel per object", "the copy"} {
		for _, kind := range filledTypes {
			if got := figure("channels and memory: the hub's changes of " + kind + " per node, " + t2 + " (its log refilled before each heap reading)"); got < 1 {
				t.Errorf("the hub's changes of %s per node, %s: %v, want at least one", kind, t2, got)
			}
		}
	}
	if got := figure("channels and memory: endpoint RSS per node, the copy, mean"); got <= 0 {
		t.Errorf("endpoint RSS not measured: %v", got)
	}
	if got := figure("kubelet restart: the kubelets' reads answered from the copy"); got <= 0 {
		t.Errorf("the restarted kubelet read nothing from the copy: %v", got)
	}
	// Its lease controller's get of its Lease is not checked here: this
	// small run restarts the kubelet seconds after it started, which
	// can be before its first Lease was created (the controller's first
	// try needs the Node it owns; the one run seen had 0 from memory and
	// 2 GET leases at kube-apiserver in the window, the other kubelet's
	// too, as a controller without a Lease of its own gets). endpoint's TestKubeletRestartReadsItsLeaseFromTheEndpoint
	// checks it; the full scenario counts it.
	figure("kubelet restart: the kubelets' reads answered from the endpoint's memory of the node's Lease")
	for name, want := range map[string]float64{
		"outage: kubelets restarted during it (a fresh root directory)":                        1,
		"outage: objects read through their node's endpoint at the end (resourceVersion \"\")": 8,
		"outage: of them, stale (not kube-apiserver's resourceVersion)":                        0,
		"outage: secrets followed through one endpoint, as the kubelet reads them":             2,
		"outage: of them, update lost":                                                         0,
		"outage: events repeated":                                                              0,
	} {
		if got := figure(name); got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	for _, l := range r.Latencies {
		t.Logf("%s: %d samples, p50 %.0f ms", l.Name, l.Count, l.P50/1000)
	}
	for _, f := range r.Figures {
		t.Logf("%s: %v %s", f.Name, f.Value, f.Unit)
	}
}
