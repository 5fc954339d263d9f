package bench

import (
	"context"
	"strings"
	"testing"
)

// TestCausalNodeproxyRefusesNoReadOfAPodJustShown runs the causal
// scenario small: 30 pods at 10/s over 3 nodes, against real
// kube-apiservers on one etcd and two real hub replicas. Every pod's
// secret must be read once on each side, and nodeproxy's side must refuse
// none (issue 13's target); the in-tree side's refusals are whatever the
// moment makes them, and are logged.
func TestCausalNodeproxyRefusesNoReadOfAPodJustShown(t *testing.T) {
	var log strings.Builder
	load := CausalLoad{Nodes: 3, Pods: 30, Rate: 10}
	r, err := runCausal(context.Background(), &Env{Causal: load, Progress: &log}, localTarget(t, startNodeproxy(t)))
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, log.String())
	}
	figures := map[string]float64{}
	for _, f := range r.Figures {
		figures[f.Name] = f.Value
	}
	for _, side := range []string{"in-tree Node authorizer", "nodeproxy webhook"} {
		if got := figures[side+": reads"]; got != float64(load.Pods) {
			t.Errorf("%s: %v reads, want one per pod, %d", side, got, load.Pods)
		}
		if got, ok := figures[side+": reads failed otherwise"]; ok {
			t.Errorf("%s: %v reads failed with something other than 403\nprogress:\n%s", side, got, log.String())
		}
	}
	if got := figures["nodeproxy webhook: reads refused (403)"]; got != 0 {
		t.Errorf("nodeproxy refused %v reads of secrets of pods the nodes had just been shown; figures %v", got, figures)
	}
	t.Logf("in-tree refusals %v; nodeproxy refusals avoided by the check %v",
		figures["in-tree Node authorizer: reads refused (403)"], figures["nodeproxy: refusals a lagging graph would have made, avoided"])
}
