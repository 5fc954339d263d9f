package hub_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/shard"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestAReviewAboutANodeHeldElsewhereIsAskedOfItsOwner: three replicas,
// so that each holds two thirds of the nodes. kube-apiserver's webhook
// asks the replica that holds neither a node's range nor its pods
// whether the node may read the secret its pod mounts: that replica
// forwards the review to the node's owner, which allows it, and a secret
// no pod of the node mounts is refused the same way; no review falls to
// kube-apiserver's list of the node's pods.
func TestAReviewAboutANodeHeldElsewhereIsAskedOfItsOwner(t *testing.T) {
	ctx := context.Background()
	const ns = "shard-webhook"
	members := []string{"hub-a", "hub-b", "hub-c"}
	p := testserver.StartSharded(t, cp, ns, members...)
	table := shard.NewTable(members)
	var node string
	for i := range 10000 {
		n := "node-webhook-" + strconv.Itoa(i)
		if !table.Held("hub-a").HasNode(n) {
			node = n
			break
		}
	}
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mounted"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
			Volumes: []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "mounted"}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := p.Servers["hub-a"]
	client := a.Client(t, cp.AdminConfig())
	routed := func(path string) float64 {
		return testserver.Gathered(t, "nodeproxy_authorizer_routed_reviews_total", map[string]string{"path": path})
	}
	ownerBefore, listBefore := routed("owner"), routed("consistent_list")
	testserver.Eventually(t, 30*time.Second, "the mounted secret allowed through hub-a", func(ctx context.Context) error {
		allowed, err := askWebhook(ctx, client, a.URL, node, ns, "mounted")
		if err != nil {
			return err
		}
		if !allowed {
			return fmt.Errorf("refused")
		}
		return nil
	})
	if allowed, err := askWebhook(ctx, client, a.URL, node, ns, "unmounted"); err != nil || allowed {
		t.Errorf("a secret the node's pods do not mount: allowed %v, error %v; want refused", allowed, err)
	}
	for _, reason := range []string{"unreachable", "timeout", "status", "malformed"} {
		for _, peer := range []string{"owner", "secondary"} {
			if n := testserver.Gathered(t, "nodeproxy_authorizer_peer_failures_total", map[string]string{"peer": peer, "reason": reason}); n > 0 {
				t.Logf("peer failures: %s %s: %v", peer, reason, n)
			}
		}
	}
	if got := routed("owner") - ownerBefore; got < 2 {
		t.Errorf("%v reviews forwarded to the owner; want the two asked at least", got)
	}
	if got := routed("consistent_list") - listBefore; got != 0 {
		t.Errorf("%v reviews decided from kube-apiserver's list; want none, the owner answering", got)
	}
}

// askWebhook asks the webhook at url, as kube-apiserver does, whether
// node may get secret ns/name.
func askWebhook(ctx context.Context, c *http.Client, url, node, ns, name string) (bool, error) {
	body, err := json.Marshal(&authorizationv1.SubjectAccessReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview"},
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Version: "v1", Resource: "secrets", Namespace: ns, Name: name},
		},
	})
	if err != nil {
		return false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/authorize", bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var review authorizationv1.SubjectAccessReview
	if err := json.NewDecoder(resp.Body).Decode(&review); err != nil || resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("review answered %d: %v", resp.StatusCode, err)
	}
	if review.Status.EvaluationError != "" {
		return false, fmt.Errorf("evaluation error: %s", review.Status.EvaluationError)
	}
	return review.Status.Allowed, nil
}
