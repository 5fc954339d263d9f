package endpoint_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	hubpkg "github.com/nodeproxy/nodeproxy/hub"
	"github.com/nodeproxy/nodeproxy/test/forwarder"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestConsistentReadsThroughAControlPlaneOutageWithTheHubUp cuts
// kube-apiserver off the hub and off the node, and leaves the node its
// hub connection, as a control-plane outage does where the hub's
// replicas run on. The hub cannot show its cache current, so it answers
// no progress request, and kube-apiserver cannot be asked: the kubelet's
// consistent reads are answered from the copy as it stands, as offline,
// rather than failing (a kubelet restarted then could start nothing).
func TestConsistentReadsThroughAControlPlaneOutageWithTheHubUp(t *testing.T) {
	apiBackend := hostPort(t, cp.URL)
	hubsAPI, err := forwarder.Start(apiBackend)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hubsAPI.Close() })
	identity, err := cp.UserConfig(testserver.ServiceAccount, "system:serviceaccounts", "system:serviceaccounts:nodeproxy")
	if err != nil {
		t.Fatal(err)
	}
	identity.Host = "https://" + hubsAPI.Addr()
	// The hub asks kube-apiserver about every progress request (the
	// default answers at the cache's versions for 90 s after a watch
	// last heard from kube-apiserver, which a cut-off watch has).
	hub := startHubWith(t, testserver.Options{Identity: identity, Configure: func(o *hubpkg.Options) { o.NodeViewHeardWithin = 0 }})
	o := newOutage(t, hub.URL)
	kp, err := cp.ClientCA.ClientCert("system:node:node-u", []string{"system:nodes"}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	n := startNodeWith(t, "node-u", nodeSpec{apiServer: "https://" + o.api.Addr(), hub: "https://" + o.hub.Addr(), kubelet: kp})
	ns := workload(t, "node-u")
	kubelet := kubernetes.NewForConfigOrDie(n.kubelet)
	ctx := context.Background()
	testserver.Eventually(t, time.Minute, "the copy holds the pod's secret", func(ctx context.Context) error {
		_, err := kubelet.CoreV1().Secrets(ns).Get(ctx, "s", metav1.GetOptions{})
		if err == nil && metric(t, n, `nodeproxy_node_requests_total{path="copy",resource="secrets",verb="get"}`) == "0" {
			return fmt.Errorf("the get was not answered from the copy")
		}
		return err
	})

	hubsAPI.Remove(apiBackend)
	hubsAPI.Cut(apiBackend)
	o.cutAPIServer()
	testserver.Eventually(t, 2*time.Minute, "a consistent read during the outage", func(ctx context.Context) error {
		s, err := kubelet.CoreV1().Secrets(ns).Get(ctx, "s", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if string(s.Data["password"]) != "pw-s" {
			return fmt.Errorf("password %q", s.Data["password"])
		}
		return nil
	})
	if got := metric(t, n, `nodeproxy_node_copy_consistent_reads_total{result="unconfirmed"}`); got == "0" || got == "" {
		t.Errorf("no consistent read answered unconfirmed: %q", got)
	}
	if got := metric(t, n, "nodeproxy_node_hub_connected"); got != "1" {
		t.Errorf("hub_connected %s: the test meant the hub up", got)
	}
	pods, err := kubelet.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-u"})
	if err != nil || len(pods.Items) != 1 {
		t.Errorf("the node's pods during the outage: %v, %v", pods, err)
	}
}
