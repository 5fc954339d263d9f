package nodeview_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// podOn is a pod of the test's namespace bound to node, using nothing.
func podOn(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
}

// TestNamespaceServicesFollowTheNodesPodsAgainstKubeAPIServer: node
// nv-svc's view holds default's kubernetes Service from the start and
// none of the test namespace's services while it has no pod there; its
// first pod brings them, before the pod; its last takes them out, after
// the pod, as LEFT.
func TestNamespaceServicesFollowTheNodesPodsAgainstKubeAPIServer(t *testing.T) {
	ctx := context.Background()
	admin := prepare(t)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "svc-env"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}
	if _, err := admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Services(ns).Delete(ctx, svc.Name, metav1.DeleteOptions{}) })
	hub := testserver.Start(t, cp, testserver.Options{})
	_, view, c := openViewOn(t, hub, "nv-svc")
	if _, held := c.held["Service default/kubernetes"]; !held {
		t.Errorf("the initial state lacks default's kubernetes Service: %s", strings.Join(c.log, " | "))
	}
	if got := c.ours(); len(got) != 0 {
		t.Errorf("the initial state of a node without pods holds %v of the test's namespace", got)
	}

	createPod(t, admin, podOn("svc-p1", "nv-svc"))
	c.until(view.Events, "ADDED Pod "+ns+"/svc-p1")
	entered := slices.Index(c.log, "ENTERED Service "+ns+"/svc-env")
	if entered < 0 || entered > slices.Index(c.log, "ADDED Pod "+ns+"/svc-p1") {
		t.Fatalf("the namespace's service did not enter before its first pod: %s", strings.Join(c.log, " | "))
	}
	createPod(t, admin, podOn("svc-p2", "nv-svc"))
	c.until(view.Events, "ADDED Pod "+ns+"/svc-p2")

	for _, name := range []string{"svc-p1", "svc-p2"} {
		if err := admin.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	c.until(view.Events, "LEFT Service "+ns+"/svc-env")
	last := slices.Index(c.log, "DELETED Pod "+ns+"/svc-p2")
	if first := slices.Index(c.log, "DELETED Pod "+ns+"/svc-p1"); first > last {
		last = first
	}
	if left := slices.Index(c.log, "LEFT Service "+ns+"/svc-env"); last < 0 || left < last {
		t.Fatalf("the namespace's service left before its last pod: %s", strings.Join(c.log, " | "))
	}
	if _, held := c.held["Service default/kubernetes"]; !held {
		t.Errorf("default's kubernetes Service left with the namespace's last pod: %s", strings.Join(c.log, " | "))
	}
}
