package endpoint_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestKubeletAheadOfTheHub: the kubelet holds a resourceVersion X of
// secrets that the hub's quiet secrets cache has not reached (it read it
// from kube-apiserver while the hub was away, or from another hub
// replica that had a later bookmark). Its list at X is refused by the hub
// with 504 after the hub's 3 s wait and answered by kube-apiserver, not
// failed; its watch from X is served by the hub at once (kube-apiserver
// vouches for X) and delivers the next change.
func TestKubeletAheadOfTheHub(t *testing.T) {
	hub := startHub(t)
	n := startNode(t, "node-ahead", hub.URL)
	ns := workload(t, "node-ahead")
	ctx := context.Background()
	kubelet := kubernetes.NewForConfigOrDie(n.kubelet)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	testserver.Eventually(t, 30*time.Second, "the secret through the hub", func(ctx context.Context) error {
		_, err := kubelet.CoreV1().Secrets(ns).Get(ctx, "s", metav1.GetOptions{})
		return err
	})
	count := func(series string) float64 {
		v, _ := strconv.ParseFloat(metric(t, n, series), 64)
		return v
	}
	// ahead returns a version of secrets kube-apiserver has reached and
	// the hub's secrets cache has not: configmaps move the revision on,
	// no secret changes, and the hub's list says where its cache is.
	ahead := func() string {
		t.Helper()
		for range 3 {
			if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "churn-"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			l, err := admin.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{Limit: 1})
			if err != nil {
				t.Fatal(err)
			}
			cached, err := kubelet.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=s"})
			if err != nil {
				t.Fatal(err)
			}
			x, _ := strconv.ParseUint(l.ResourceVersion, 10, 64)
			at, _ := strconv.ParseUint(cached.ResourceVersion, 10, 64)
			if at < x {
				return l.ResourceVersion
			}
			t.Logf("the hub's secrets are at %d, not below kube-apiserver's %d: a bookmark came just now", at, x)
		}
		t.Fatal("the hub's secrets cache was never below kube-apiserver's version: nothing to test")
		return ""
	}

	t.Run("a list at X is answered by kube-apiserver", func(t *testing.T) {
		for range 3 {
			x := ahead()
			fallbacks := count(`nodeproxy_node_hub_fallbacks_total{reason="error"}`)
			start := time.Now()
			got, err := kubelet.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=s", ResourceVersion: x})
			if err != nil {
				t.Fatalf("list at %s: %v", x, err)
			}
			if len(got.Items) != 1 {
				t.Errorf("list at %s: %d items, want s", x, len(got.Items))
			}
			if count(`nodeproxy_node_hub_fallbacks_total{reason="error"}`) > fallbacks {
				t.Logf("the list at %s went to kube-apiserver after %s", x, time.Since(start).Round(time.Millisecond))
				return
			}
			t.Logf("the hub's cache reached %s within its wait; again", x)
		}
		t.Fatal("the hub's cache always reached the version within its wait: the fallback was not tested")
	})
	t.Run("a watch from X is served by the hub", func(t *testing.T) {
		x := ahead()
		watches := count(`nodeproxy_node_requests_total{path="hub",resource="secrets",verb="watch"}`)
		w, err := kubelet.CoreV1().Secrets(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=s", ResourceVersion: x})
		if err != nil {
			t.Fatalf("watch from %s: %v", x, err)
		}
		defer w.Stop()
		if count(`nodeproxy_node_requests_total{path="hub",resource="secrets",verb="watch"}`) <= watches {
			t.Errorf("the watch from %s was not served by the hub", x)
		}
		rotate(t, ns, "s", "after")
		select {
		case ev := <-w.ResultChan():
			s, _ := ev.Object.(*corev1.Secret)
			if ev.Type != watch.Modified || s == nil || string(s.Data["password"]) != "after" {
				t.Fatalf("first event %s %T, want MODIFIED s with the new password", ev.Type, ev.Object)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no event within 30 s")
		}
	})
}
