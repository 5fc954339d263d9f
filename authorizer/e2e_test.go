package authorizer_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// The end-to-end tests run kube-apiserver with the authorization
// configuration from manifests/ (nodeproxy's webhook, then RBAC; no
// in-tree Node authorizer) and nodeproxy in-process behind it, and ask as
// nodes through kube-apiserver.

var (
	cp      *controlplane.ControlPlane
	npPort  int // where kube-apiserver's webhook finds nodeproxy
	webhook = testserver.WebhookUser
)

func TestMain(m *testing.M) { os.Exit(testserver.RunBehindWebhook(m, &cp, &npPort)) }

// ns and pvName are fresh for every run of the test, so that -count=N can
// run it again against the same control plane.
var (
	ns, pvName string
	runs       atomic.Int32
)

// createWorkload: pod a on node-a and pod b on node-b, each with its own secret,
// configmap and claim; claim a is bound to PV a, whose CSI node-publish
// secret is pv-secret-a.
func createWorkload(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"a", "b"} {
		must(admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "secret-" + n}}, metav1.CreateOptions{}))
		must(admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + n}}, metav1.CreateOptions{}))
		must(admin.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "pvc-" + n},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}, metav1.CreateOptions{}))
	}
	must(admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pv-secret-a"}}, metav1.CreateOptions{}))
	must(admin.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			ClaimRef:    &corev1.ObjectReference{Namespace: ns, Name: "pvc-a"},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "csi.example.com", VolumeHandle: "a",
				NodePublishSecretRef: &corev1.SecretReference{Namespace: ns, Name: "pv-secret-a"},
			}},
		},
	}, metav1.CreateOptions{}))
	for _, n := range []string{"a", "b"} {
		must(admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: n},
			Spec: corev1.PodSpec{
				NodeName:   "node-" + n,
				Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
				Volumes: []corev1.Volume{
					{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "secret-" + n}}},
					{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm-" + n}}}},
					{Name: "p", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "pvc-" + n}}},
				},
			},
		}, metav1.CreateOptions{}))
	}
}

func clientset(t *testing.T, cfg *rest.Config, err error) kubernetes.Interface {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNodesReadOnlyWhatTheirPodsUseThroughKubeAPIServer(t *testing.T) {
	run := runs.Add(1)
	ns, pvName = fmt.Sprintf("e2e-%d", run), fmt.Sprintf("pv-a-%d", run)
	testserver.InstallRBAC(t, cp, "rbac-webhook.yaml")
	srv := testserver.Start(t, cp, testserver.Options{Port: npPort})
	srv.WaitReady(t, 90*time.Second)
	admin := clientset(t, cp.AdminConfig(), nil)
	createWorkload(t, admin)
	nodeCfg, err := cp.NodeConfig("node-a")
	nodeA := clientset(t, nodeCfg, err)

	// The pod and the volume reach nodeproxy's graph through two watches,
	// in either order: wait for the end of the longest path, the volume's
	// secret, as well as for the pod's own secret.
	testserver.Eventually(t, 30*time.Second, "node-a reads its pod's secret and its volume's secret", func(ctx context.Context) error {
		if _, err := nodeA.CoreV1().Secrets(ns).Get(ctx, "secret-a", metav1.GetOptions{}); err != nil {
			return err
		}
		_, err := nodeA.CoreV1().Secrets(ns).Get(ctx, "pv-secret-a", metav1.GetOptions{})
		return err
	})

	ctx := context.Background()
	list := func(selector string) error {
		_, err := nodeA.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: selector})
		return err
	}
	for _, tc := range []struct {
		name    string
		call    func() error
		allowed bool
	}{
		{"secret of own pod", func() error {
			_, err := nodeA.CoreV1().Secrets(ns).Get(ctx, "secret-a", metav1.GetOptions{})
			return err
		}, true},
		{"configmap of own pod", func() error {
			_, err := nodeA.CoreV1().ConfigMaps(ns).Get(ctx, "cm-a", metav1.GetOptions{})
			return err
		}, true},
		{"claim of own pod", func() error {
			_, err := nodeA.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "pvc-a", metav1.GetOptions{})
			return err
		}, true},
		{"volume bound to own claim", func() error {
			_, err := nodeA.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
			return err
		}, true},
		{"secret of that volume", func() error {
			_, err := nodeA.CoreV1().Secrets(ns).Get(ctx, "pv-secret-a", metav1.GetOptions{})
			return err
		}, true},
		{"own pod", func() error { _, err := nodeA.CoreV1().Pods(ns).Get(ctx, "a", metav1.GetOptions{}); return err }, true},
		{"list own pods by spec.nodeName", func() error { return list("spec.nodeName=node-a") }, true},
		{"secret of node-b's pod", func() error {
			_, err := nodeA.CoreV1().Secrets(ns).Get(ctx, "secret-b", metav1.GetOptions{})
			return err
		}, false},
		{"configmap of node-b's pod", func() error {
			_, err := nodeA.CoreV1().ConfigMaps(ns).Get(ctx, "cm-b", metav1.GetOptions{})
			return err
		}, false},
		{"claim of node-b's pod", func() error {
			_, err := nodeA.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "pvc-b", metav1.GetOptions{})
			return err
		}, false},
		{"node-b's pod", func() error { _, err := nodeA.CoreV1().Pods(ns).Get(ctx, "b", metav1.GetOptions{}); return err }, false},
		{"list all secrets", func() error { _, err := nodeA.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); return err }, false},
		{"list node-b's pods", func() error { return list("spec.nodeName=node-b") }, false},
		{"list all pods", func() error { return list("") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			switch {
			case tc.allowed && err != nil:
				t.Errorf("refused: %v", err)
			case !tc.allowed && !apierrors.IsForbidden(err):
				t.Errorf("want 403 Forbidden, got %v", err)
			}
		})
	}

	if err := admin.CoreV1().Pods(ns).Delete(ctx, "a", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 30*time.Second, "node-a loses its deleted pod's secret", func(ctx context.Context) error {
		_, err := nodeA.CoreV1().Secrets(ns).Get(ctx, "secret-a", metav1.GetOptions{})
		if apierrors.IsForbidden(err) {
			return nil
		}
		return fmt.Errorf("still readable (err %v)", err)
	})
	for _, get := range []func() error{
		func() error {
			_, err := nodeA.CoreV1().ConfigMaps(ns).Get(ctx, "cm-a", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := nodeA.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := nodeA.CoreV1().Secrets(ns).Get(ctx, "pv-secret-a", metav1.GetOptions{})
			return err
		},
	} {
		if err := get(); !apierrors.IsForbidden(err) {
			t.Errorf("after the pod's deletion: want 403, got %v", err)
		}
	}
}
