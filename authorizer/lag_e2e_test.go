package authorizer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeproxy/nodeproxy/hub"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestLaggingReplicaDoesNotRefuseWhatTheNodeWasShown forces issue 13's
// causal case: the replica's pods watch runs lagBy behind kube-apiserver.
// Pods bound to a node, each with a fresh secret, are created one by one,
// and the node, the moment kube-apiserver has the pod, reads the pod and
// its secret through kube-apiserver, which asks nodeproxy's webhook (its
// decision cache off). With the refresh off, the lagging graph refuses,
// which shows the lag is there; with it on (the default), nothing is
// refused.
func TestLaggingReplicaDoesNotRefuseWhatTheNodeWasShown(t *testing.T) {
	const (
		lagBy = 700 * time.Millisecond
		pods  = 4
		node  = "node-lag"
	)
	ctx := context.Background()
	ns := fmt.Sprintf("lag-%d", runs.Add(1))
	testserver.InstallRBAC(t, cp, "rbac-webhook.yaml")
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	admin := clientset(t, cp.AdminConfig(), nil)
	nodeCfg, err := cp.NodeConfig(node)
	nodeClient := clientset(t, nodeCfg, err)

	for _, tc := range []struct {
		name        string
		args        []string
		wantRefused bool
	}{
		{"refresh off: the lagging graph refuses", []string{"--node-refresh-timeout=0"}, true},
		{"refresh on: nothing refused", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testserver.Start(t, cp, testserver.Options{Port: npPort, Args: tc.args, Configure: func(o *hub.Options) {
				o.KubeTransportWrapper = testserver.LagWatches("pods", lagBy)
			}})
			defer srv.Stop(t)
			srv.WaitReady(t, 90*time.Second)
			refused, reads := 0, 0
			read := func(what string, get func() error) {
				reads++
				switch err := get(); {
				case apierrors.IsForbidden(err):
					refused++
					t.Logf("%s refused: %v", what, err)
				case err != nil:
					t.Fatalf("%s: %v", what, err)
				}
			}
			for i := range pods {
				name := fmt.Sprintf("%s-%d", map[bool]string{true: "off", false: "on"}[tc.wantRefused], i)
				if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				if _, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: name},
					Spec: corev1.PodSpec{
						NodeName:   node,
						Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
						Volumes:    []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name}}}},
					},
				}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				read("pod "+name, func() error { _, err := nodeClient.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); return err })
				read("secret "+name, func() error {
					_, err := nodeClient.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
					return err
				})
			}
			switch {
			case tc.wantRefused && refused == 0:
				t.Errorf("no read of %d refused with the refresh off: the test did not make the graph lag", reads)
			case !tc.wantRefused && refused > 0:
				t.Errorf("%d of %d reads refused by a replica whose graph lagged %v", refused, reads, lagBy)
			}
		})
	}
}

// BenchmarkNodeRefusal measures what the refusal path costs through the
// webhook (a SubjectAccessReview posted to the hub, as kube-apiserver
// posts it) for a secret no pod of the node references:
//   - "check off": the graph's answer alone, as before issue 13;
//   - "check on, new node each time": one list of the node's pods from
//     kube-apiserver (none here) and the store already past it, the cost
//     a legitimate refusal pays once;
//   - "check on, one node spamming": every refusal of the same node waits
//     for the next list, lists at most one per --node-refresh-min-interval,
//     so a node spamming forbidden reads is slowed to that pace and
//     kube-apiserver sees one list per interval, not one per request.
//
// go test -run '^$' -bench NodeRefusal -benchtime 200x ./authorizer/
func BenchmarkNodeRefusal(b *testing.B) {
	ctx := context.Background()
	testserver.InstallRBAC(b, cp, "rbac-webhook.yaml")
	webhookCfg, err := cp.UserConfig(testserver.WebhookUser)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name     string
		args     []string
		sameNode bool
	}{
		{"check off", []string{"--node-refresh-timeout=0"}, true},
		{"check on, new node each time", nil, false},
		{"check on, one node spamming", nil, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv := testserver.Start(b, cp, testserver.Options{Args: bc.args})
			defer srv.Stop(b)
			srv.WaitReady(b, 90*time.Second)
			client := srv.Client(b, webhookCfg)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				node := "node-spam"
				if !bc.sameNode {
					node = fmt.Sprintf("node-%d", i)
				}
				if allowed := postReview(ctx, b, client, srv.URL, node); allowed {
					b.Fatal("a secret no pod references was allowed")
				}
			}
		})
	}
}

// postReview asks the hub's webhook whether node may get secret
// default/unreferenced, as kube-apiserver would.
func postReview(ctx context.Context, b *testing.B, c *http.Client, url, node string) bool {
	body, err := json.Marshal(&authorizationv1.SubjectAccessReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview"},
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Version: "v1", Resource: "secrets", Namespace: "default", Name: "unreferenced"},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/authorize", bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var review authorizationv1.SubjectAccessReview
	if err := json.NewDecoder(resp.Body).Decode(&review); err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("review answered %d: %v", resp.StatusCode, err)
	}
	if review.Status.EvaluationError != "" {
		b.Fatalf("evaluation error: %s", review.Status.EvaluationError)
	}
	return review.Status.Allowed
}
