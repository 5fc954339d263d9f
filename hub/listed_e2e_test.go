package hub_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestAHubStartsWithItsPodsTakenInAsTheyStream: a hub started on a
// cluster that has pods lists them with a watch-list, and its pod store
// takes each in as bytes the moment it arrives (cache's listed.go), not
// once the whole list is held decoded; a node then reads its pods from
// the hub as kube-apiserver has them.
func TestAHubStartsWithItsPodsTakenInAsTheyStream(t *testing.T) {
	ctx := context.Background()
	const ns, n = "listed", 12
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	for i := range n {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p" + strconv.Itoa(i), Labels: map[string]string{"app": "listed"}},
			Spec: corev1.PodSpec{
				NodeName:                     "node-listed-" + strconv.Itoa(i%2),
				AutomountServiceAccountToken: new(false),
				Containers:                   []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
			},
		}
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	streamed := func() float64 {
		return testserver.Gathered(t, "nodeproxy_cache_listed_as_bytes_total", map[string]string{"resource": "pods"})
	}
	before := streamed()
	testserver.InstallRBAC(t, cp)
	srv := testserver.Start(t, cp, testserver.Options{})
	srv.WaitReady(t, 90*time.Second)
	if got := streamed() - before; got < n {
		t.Fatalf("%v pods taken in as the list streamed, want at least the namespace's %d", got, n)
	}

	node, err := cp.NodeConfig("node-listed-0")
	if err != nil {
		t.Fatal(err)
	}
	code, raw, status := postBulkGet(t, srv, srv.Client(t, node), v1alpha1.GetOperation{
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: ns,
		Options: metav1.ListOptions{FieldSelector: "spec.nodeName=node-listed-0"},
	})
	if code != http.StatusCreated {
		t.Fatalf("bulk get: %d %v", code, status)
	}
	var fromHub corev1.PodList
	if err := json.Unmarshal(raw, &fromHub); err != nil {
		t.Fatal(err)
	}
	want, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-listed-0"})
	if err != nil {
		t.Fatal(err)
	}
	if len(fromHub.Items) != len(want.Items) || len(want.Items) != n/2 {
		t.Fatalf("the hub has %d pods of the node, kube-apiserver %d, want %d", len(fromHub.Items), len(want.Items), n/2)
	}
	for i := range want.Items {
		w := want.Items[i].DeepCopy()
		w.ManagedFields = nil
		w.TypeMeta = fromHub.Items[i].TypeMeta // a bulk get's items carry their type (docs/api.md)
		if !equality.Semantic.DeepEqual(&fromHub.Items[i], w) {
			t.Errorf("pod %s from the hub is not kube-apiserver's: %s", w.Name, cmp.Diff(w, &fromHub.Items[i]))
		}
	}
}
