package hub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
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
	client := srv.Client(t, node)
	body := fmt.Sprintf(`{"apiVersion":"bulk.k8s.io/v1alpha1","kind":"BulkGetOperation","spec":{"operations":[`+
		`{"resource":{"group":"","version":"v1","resource":"pods"},"namespace":%q,"options":{"fieldSelector":"spec.nodeName=node-listed-0"}}]}}`, ns)
	resp, err := client.Post(srv.URL+"/apis/bulk.k8s.io/v1alpha1/bulkgetoperations", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("bulk get: %d %s", resp.StatusCode, raw)
	}
	var out v1alpha1.BulkGetOperation
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	var fromHub corev1.PodList
	if len(out.Status.Results) != 1 {
		t.Fatalf("%d results", len(out.Status.Results))
	}
	if err := json.Unmarshal(out.Status.Results[0].Raw, &fromHub); err != nil {
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
