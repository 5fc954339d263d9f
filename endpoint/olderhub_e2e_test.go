package endpoint_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestEndpointFollowsAHubThatRefusesTheNewestView runs the endpoint
// against a hub that serves the node view at v1alpha1 alone
// (--node-view-versions=v1alpha1, as a replica of the release before
// v1alpha2 answers): the endpoint's ask for v1alpha2 is refused, it
// opens v1alpha1, its copy fills, and the kubelet's read of its secret
// is served from it. The copy of v1alpha1 carries no CSINode: the
// kubelet's get of its CSINode goes to kube-apiserver, as without a copy.
func TestEndpointFollowsAHubThatRefusesTheNewestView(t *testing.T) {
	hub := startHubWith(t, testserver.Options{Args: []string{"--node-view-versions=v1alpha1"}})
	const name = "node-v1alpha1"
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	if _, err := admin.StorageV1().CSINodes().Create(ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ns := workload(t, name)
	// The metrics are the process's, which other tests count in too.
	const (
		olderHub    = `nodeproxy_node_view_reopens_total{reason="older_hub"}`
		secretCopy  = `nodeproxy_node_requests_total{path="copy",resource="secrets",verb="get"}`
		csinodeCopy = `nodeproxy_node_requests_total{path="copy",resource="csinodes",verb="get"}`
		csinodeAPI  = `nodeproxy_node_requests_total{path="apiserver",resource="csinodes",verb="get"}`
	)
	n := startNode(t, name, hub.URL)
	secrets := counter(t, n, secretCopy)
	kubelet := kubernetes.NewForConfigOrDie(n.kubelet)

	testserver.Eventually(t, 60*time.Second, "the copy of v1alpha1 serves the pod's secret", func(ctx context.Context) error {
		if got := counter(t, n, "nodeproxy_node_copy_objects"); got == 0 {
			return fmt.Errorf("no object in the copy")
		}
		s, err := kubelet.CoreV1().Secrets(ns).Get(ctx, "s", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if string(s.Data["password"]) != "pw-s" {
			return fmt.Errorf("the secret's password: %q", s.Data["password"])
		}
		if got := counter(t, n, secretCopy); got <= secrets {
			return fmt.Errorf("the get was not served from the copy")
		}
		return nil
	})
	// Counted before the first scrape; no other test meets such a hub.
	if got := counter(t, n, olderHub); got < 1 {
		t.Errorf("%s = %v: the hub's refusal of v1alpha2 was not seen", olderHub, got)
	}

	fromCopy, fromAPI := counter(t, n, csinodeCopy), counter(t, n, csinodeAPI)
	if _, err := kubelet.StorageV1().CSINodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the node's CSINode: %v", err)
	}
	if got := counter(t, n, csinodeCopy); got != fromCopy {
		t.Errorf("the CSINode was read from a copy of v1alpha1, which does not carry it: %s %v -> %v", csinodeCopy, fromCopy, got)
	}
	if got := counter(t, n, csinodeAPI); got != fromAPI+1 {
		t.Errorf("the CSINode's get did not go to kube-apiserver: %s %v -> %v", csinodeAPI, fromAPI, got)
	}
}
