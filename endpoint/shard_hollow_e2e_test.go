package endpoint_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/shard"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestHollowKubeletsBehindShardedReplicas: real kubelets (hollow) behind
// node endpoints that dial the Service of three sharded hub replicas.
//   - Ownership and a redirect: each node is sent to its owner, and its
//     pod runs with its secret's file, read through its view there.
//   - A failover: the owner of one node turns not ready; its warm
//     secondary serves the node (no view opened whole), which sees its
//     pod deleted and a new one run.
//   - A rebalance: a fourth replica joins; a node the new table gives it
//     moves there, served from what it listed at its start, and a new
//     pod of that node runs.
func TestHollowKubeletsBehindShardedReplicas(t *testing.T) {
	ctx := context.Background()
	tools, err := controlplane.EnsureTools(ctx, os.Stderr, "kubemark")
	if err != nil {
		t.Fatal(err)
	}
	members := []string{"hub-a", "hub-b", "hub-c"}
	sh := testserver.StartSharded(t, cp, "shard-hollow", members...)
	three, four := shard.NewTable(members), shard.NewTable(append(members, "hub-d"))
	// failing: owned by hub-b, with three replicas and four; joining:
	// hub-c's with three, hub-d's with four.
	var failing, joining string
	for i := 0; failing == "" || joining == ""; i++ {
		n := fmt.Sprintf("hollow-shard-%d", i)
		switch {
		case failing == "" && three.OwnerOf(n) == "hub-b" && four.OwnerOf(n) == "hub-b":
			failing = n
		case joining == "" && three.OwnerOf(n) == "hub-c" && four.OwnerOf(n) == "hub-d":
			joining = n
		}
	}
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	ns := fmt.Sprintf("shard-hollow-%d", runs.Add(1))
	credsAndSettings(t, ns)
	gathered := func(name string, labels map[string]string) float64 { return testserver.Gathered(t, name, labels) }
	opens := func(how string) float64 {
		return gathered("nodeproxy_nodeview_opens_total", map[string]string{"how": how})
	}
	redirected := func() float64 {
		return gathered("nodeproxy_hub_shard_routing_total", map[string]string{"kind": "watch", "decision": "redirected"})
	}
	moved := func() float64 {
		return gathered("nodeproxy_hub_shard_routing_total", map[string]string{"kind": "watch", "decision": "moved"})
	}
	redirected0 := redirected()

	runPod := func(n *hollowNode, name string) *corev1.Pod {
		t.Helper()
		pod, err := admin.CoreV1().Pods(ns).Create(ctx, podUsingCreds(name, n.name), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.runs(pod, false)
		eventuallyFile(t, n.kubelet.SecretVolumeFile(pod.UID, "creds", "password"), "first")
		return pod
	}
	// Ownership and a redirect: the Service reaches hub-a, which owns
	// neither node.
	sh.Behind("hub-a")
	a := newShardedHollowNode(t, sh, tools["kubemark"], failing)
	b := newShardedHollowNode(t, sh, tools["kubemark"], joining)
	podA, _ := runPod(a, "app-a"), runPod(b, "app-b")
	if got := redirected() - redirected0; got < 2 {
		t.Errorf("%v bulk watch connections redirected; want each node's sent from hub-a to its owner", got)
	}

	// A failover: hub-b not ready; its node goes to its secondary.
	initial0, expired0, replaced0, moved0 := opens("initial"), opens("expired"), opens("replaced"), moved()
	sh.SetReady(t, "hub-b", false)
	testserver.Eventually(t, 30*time.Second, "hub-b ends "+failing+"'s connection", func(context.Context) error {
		if got := moved() - moved0; got < 1 {
			return fmt.Errorf("%v connections moved", got)
		}
		return nil
	})
	if err := admin.CoreV1().Pods(ns).Delete(ctx, podA.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 2*time.Minute, podA.Name+" stopped on "+failing, func(ctx context.Context) error {
		if err := a.kubelet.Runs(ctx, podA.UID); err == nil {
			return fmt.Errorf("the kubelet still runs it")
		}
		return nil
	})
	runPod(a, "app-a2")
	if got := opens("initial") + opens("expired") + opens("replaced") - initial0 - expired0 - replaced0; got != 0 {
		t.Errorf("%v views opened whole over the failover; want every one resumed", got)
	}
	sh.SetReady(t, "hub-b", true)

	// A rebalance: hub-d joins, and takes joining from hub-c.
	// Pods change somewhere all the while, as in a live cluster: the
	// replicas' pod stores move past hub-d's first list, and the views
	// hub-c moves are bookmarked there. (In a cluster where no pod
	// changed since the new replica listed, a moved view's pods
	// position is older than its change log, and the view is sent
	// afresh: docs/architecture.md, "Sharding".)
	churn, stopChurn := context.WithCancel(ctx)
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		for i := 0; churn.Err() == nil; i++ {
			patch := []byte(`{"metadata":{"annotations":{"churn":"` + strconv.Itoa(i) + `"}}}`)
			_, _ = admin.CoreV1().Pods(ns).Patch(churn, "app-a2", types.MergePatchType, patch, metav1.PatchOptions{})
			select {
			case <-churn.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	defer func() { stopChurn(); <-churned }()
	moved1, resumed1 := moved(), opens("resumed")
	sh.Add(t, "hub-d")
	testserver.Eventually(t, 60*time.Second, "hub-c ends "+joining+"'s connection, and its view resumes at hub-d", func(context.Context) error {
		if got := moved() - moved1; got < 1 {
			return fmt.Errorf("%v connections moved", got)
		}
		if got := opens("resumed") - resumed1; got < 1 {
			return fmt.Errorf("%v views resumed", got)
		}
		return nil
	})
	runPod(b, "app-b2")
	if got := opens("expired") + opens("replaced") - expired0 - replaced0; got != 0 {
		t.Errorf("%v views expired or replaced whole over the failover and the rebalance; want none", got)
	}
}
