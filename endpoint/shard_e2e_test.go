package endpoint_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestANodeFollowsItsOwnerAndMovesWithItsView: two sharded hub replicas
// behind a headless Service; the node endpoint dials the Service, lands
// on hub-a, and is redirected to hub-b, which owns its node: its view
// opens there, and the kubelet reads its secret from the node's copy.
// hub-b's endpoint then turns not ready: hub-b ends the node's
// connection, the endpoint dials the Service again, hub-a (which owns
// every node now) serves it, and the view resumes there from the copy's
// position, not reopened whole: a change written after the move reaches
// the kubelet from the copy.
func TestANodeFollowsItsOwnerAndMovesWithItsView(t *testing.T) {
	ctx := context.Background()
	sh := testserver.StartSharded(t, cp, "shard-endpoint", "hub-a", "hub-b")
	node := testserver.NodeOwnedBy("node-shard-", "hub-b", "hub-a", "hub-b")
	count := func(name string, labels map[string]string) float64 { return testserver.Gathered(t, name, labels) }
	opens := func(how string) float64 {
		return count("nodeproxy_nodeview_opens_total", map[string]string{"how": how})
	}
	followed := func() float64 {
		return count("nodeproxy_watchmux_client_redirects_total", map[string]string{"result": "followed"})
	}
	moved := func() float64 {
		return count("nodeproxy_hub_shard_routing_total", map[string]string{"kind": "watch", "decision": "moved"})
	}
	initial0, resumed0, expired0, replaced0 := opens("initial"), opens("resumed"), opens("expired"), opens("replaced")
	followed0, moved0 := followed(), moved()

	ns := workload(t, node)
	kp, err := cp.ClientCA.ClientCert("system:node:"+node, []string{"system:nodes"}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	n := startNodeWith(t, node, nodeSpec{hub: sh.ServiceURL(), hubDial: sh.Dial, kubelet: kp})
	kubelet := kubernetes.NewForConfigOrDie(n.kubelet)
	byName := fields.OneTermEqualSelector("metadata.name", "s").String()
	readFromCopy := func(what, password string) {
		t.Helper()
		testserver.Eventually(t, 60*time.Second, what, func(ctx context.Context) error {
			before := metric(t, n, `nodeproxy_node_requests_total{path="copy",resource="secrets",verb="list"}`)
			list, err := kubelet.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{FieldSelector: byName})
			if err != nil {
				return err
			}
			if metric(t, n, `nodeproxy_node_requests_total{path="copy",resource="secrets",verb="list"}`) == before {
				return fmt.Errorf("the list was not the copy's")
			}
			if len(list.Items) != 1 || string(list.Items[0].Data["password"]) != password {
				return fmt.Errorf("the copy has %v", list.Items)
			}
			return nil
		})
	}
	readFromCopy("the secret read from the copy of the view at hub-b", "pw-s")
	if got := followed() - followed0; got < 1 {
		t.Fatalf("%v redirects followed, want the endpoint's dial sent from hub-a to hub-b", got)
	}

	sh.SetReady(t, "hub-b", false)
	testserver.Eventually(t, 30*time.Second, "hub-b ends the node's connection", func(context.Context) error {
		if got := moved() - moved0; got != 1 {
			return fmt.Errorf("%v connections moved", got)
		}
		return nil
	})
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	if _, err := admin.CoreV1().Secrets(ns).Update(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s"}, Data: map[string][]byte{"password": []byte("pw-moved")},
	}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	readFromCopy("the change after the move read from the copy of the view at hub-a", "pw-moved")

	if got := opens("initial") - initial0; got != 1 {
		t.Errorf("%v views opened with their initial state, want the first one alone", got)
	}
	if got := opens("resumed") - resumed0; got < 1 {
		t.Errorf("%v views resumed, want the node's at hub-a", got)
	}
	if got := opens("expired") + opens("replaced") - expired0 - replaced0; got != 0 {
		t.Errorf("%v views expired or replaced whole across the move, want none", got)
	}
}
