package hub_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// podUsing makes pod p on node in ns that mounts secrets names (which
// need not exist yet), so that the node may read them.
func podUsing(t testing.TB, admin kubernetes.Interface, ns, node string, volumes ...corev1.Volume) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
			Volumes:    volumes,
		},
	}
	if _, err := admin.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func secretVolume(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name}}}
}

// TestNodeCannotWatchWhatItMayOnlyGet: the Node authorizer lets a node
// get its pod's claim, never watch it, and the hub decides a channel as
// the watch it is: a channel on the claim by name is refused with 403
// and the authorizer's reason, while one on the pod's secret opens, and
// a bulk get of the claim by name is allowed (a get). Before, a channel
// naming one object was decided as a get, and the claim's channel opened.
func TestNodeCannotWatchWhatItMayOnlyGet(t *testing.T) {
	const (
		ns   = "watch-verb"
		node = "node-watch-verb"
	)
	ctx := context.Background()
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	testserver.InstallRBAC(t, cp)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := admin.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	writeSecret(t, admin, ns, "s", "0")
	podUsing(t, admin, ns, node, secretVolume("s"),
		corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}})
	srv := startReplica(t)
	c := dialAsNode(t, srv, node)
	claims := v1alpha1.GetOperation{
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}, Namespace: ns,
		Options: metav1.ListOptions{FieldSelector: "metadata.name=data"},
	}

	// The secret's channel opening says the replica's graph has the pod.
	testserver.Eventually(t, 30*time.Second, "the node's channel on its secret opens", func(ctx context.Context) error {
		ch, err := c.Watch(ctx, secretsIn(ns, "metadata.name=s", ""))
		if err != nil {
			return err
		}
		return c.CloseWatch(ctx, ch)
	})
	_, err := c.Watch(ctx, claims)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "can only get individual resources of this type") {
		t.Fatalf("the node's channel on its pod's claim: %v, want 403 with the Node authorizer's reason", err)
	}

	nodeCfg, err := cp.NodeConfig(node)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, status := postBulkGet(t, srv, srv.Client(t, nodeCfg), claims); code != http.StatusCreated {
		t.Fatalf("the node's bulk get of its pod's claim: %d %+v, want 201", code, status)
	}
}
