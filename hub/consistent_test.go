package hub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/hub"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// secretsLag is how far the lagging replica's secrets watch runs behind
// kube-apiserver: long enough that a read right after a write finds the
// cache without it, well inside the 3 s a consistent read may wait.
const secretsLag = time.Second

// startLaggingReplica runs a hub whose secrets watch runs secretsLag
// behind kube-apiserver (test/testserver.LagWatches).
func startLaggingReplica(t testing.TB) *testserver.Server {
	t.Helper()
	srv := testserver.Start(t, cp, testserver.Options{Configure: func(o *hub.Options) {
		o.KubeTransportWrapper = testserver.LagWatches("secrets", secretsLag)
	}})
	srv.WaitReady(t, 90*time.Second)
	return srv
}

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

// nodeGetsSecret is the named bulk get a node endpoint sends for a
// kubelet's GET of ns/name with resourceVersion rv: the status code and
// the secrets' data v, or the Status.
func nodeGetsSecret(t testing.TB, srv *testserver.Server, node *http.Client, ns, name, rv string) (int, []string, *metav1.Status) {
	t.Helper()
	op := secretsIn(ns, "metadata.name="+name, rv)
	body, err := json.Marshal(&v1alpha1.BulkGetOperation{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "BulkGetOperation"},
		Spec:     v1alpha1.BulkGetOperationSpec{Operations: []v1alpha1.GetOperation{op}},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := node.Post(srv.URL+"/apis/bulk.k8s.io/v1alpha1/bulkgetoperations", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated {
		var status metav1.Status
		if err := json.Unmarshal(raw, &status); err != nil {
			t.Fatalf("%d without a Status: %s", resp.StatusCode, raw)
		}
		return resp.StatusCode, nil, &status
	}
	var out v1alpha1.BulkGetOperation
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Status.Results) != 1 {
		t.Fatalf("answer %s: %v", raw, err)
	}
	var list corev1.SecretList
	if err := json.Unmarshal(out.Status.Results[0].Raw, &list); err != nil {
		t.Fatal(err)
	}
	var vs []string
	for _, s := range list.Items {
		vs = append(vs, string(s.Data["v"]))
	}
	return resp.StatusCode, vs, nil
}

// TestConsistentReadsThroughALaggingReplica: through a replica whose
// secrets watch runs a second behind kube-apiserver, a node that reads
// with resourceVersion "" right after a write (a CSI driver's
// nodePublishSecretRef GET of a secret just created; a reflector's
// streaming list after a 410) gets kube-apiserver's state, never an
// older one: the secret just created (not an empty list, which the
// endpoint turns into 404), nothing once it is deleted, the new data in
// a streaming list's initial state. Before, "" read the cache as it
// stood, as "0" still does: every one of these saw the state of a second
// before (checked by reverting bulk/parse.go's "" case).
func TestConsistentReadsThroughALaggingReplica(t *testing.T) {
	const (
		ns   = "consistent"
		node = "node-consistent"
	)
	ctx := context.Background()
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	testserver.InstallRBAC(t, cp)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	podUsing(t, admin, ns, node, secretVolume("csi"), secretVolume("watched"))
	srv := startLaggingReplica(t)
	nodeCfg, err := cp.NodeConfig(node)
	if err != nil {
		t.Fatal(err)
	}
	nodeClient := srv.Client(t, nodeCfg)
	before := gatheredSum(t, "nodeproxy_bulk_consistent_reads_total", `resource="secrets"`)

	t.Run("a secret read by name right after its creation", func(t *testing.T) {
		writeSecret(t, admin, ns, "csi", "1")
		code, got, status := nodeGetsSecret(t, srv, nodeClient, ns, "csi", "")
		if code != http.StatusCreated || len(got) != 1 || got[0] != "1" {
			t.Fatalf("the node read %d %v %+v, want the secret just created", code, got, status)
		}
	})
	t.Run("a secret read by name right after its deletion", func(t *testing.T) {
		// The replica has the secret: the question is whether a read
		// after the deletion still sees it.
		testserver.Eventually(t, 30*time.Second, "the replica has the secret", func(context.Context) error {
			if _, got, _ := nodeGetsSecret(t, srv, nodeClient, ns, "csi", "0"); len(got) != 1 {
				return fmt.Errorf("v=%v", got)
			}
			return nil
		})
		if err := admin.CoreV1().Secrets(ns).Delete(ctx, "csi", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		code, got, status := nodeGetsSecret(t, srv, nodeClient, ns, "csi", "")
		if code != http.StatusCreated || len(got) != 0 {
			t.Fatalf("the node read %d %v %+v, want nothing: the secret was deleted", code, got, status)
		}
	})
	t.Run("a streaming list right after an update", func(t *testing.T) {
		writeSecret(t, admin, ns, "watched", "1")
		c := dialAsNode(t, srv, node)
		// Wait until the replica has the first version: the question
		// is whether the streaming list sees the second.
		testserver.Eventually(t, 30*time.Second, "the replica has v=1", func(context.Context) error {
			if _, got, _ := nodeGetsSecret(t, srv, nodeClient, ns, "watched", "0"); len(got) != 1 || got[0] != "1" {
				return fmt.Errorf("v=%v", got)
			}
			return nil
		})
		writeSecret(t, admin, ns, "watched", "2")
		sel := secretsIn(ns, "metadata.name=watched", "")
		sel.Options.SendInitialEvents = ptr.To(true)
		sel.Options.AllowWatchBookmarks = true
		sel.Options.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
		ch, err := c.Watch(ctx, sel)
		if err != nil {
			t.Fatal(err)
		}
		if ev := nextSeen(t, ch); ev.typ != watch.Added || ev.v != "2" {
			t.Fatalf("initial state %+v, want ADDED with v=2", ev)
		}
	})
	if got := gatheredSum(t, "nodeproxy_bulk_consistent_reads_total", `resource="secrets"`) - before; got < 3 {
		t.Errorf("nodeproxy_bulk_consistent_reads_total{resource=\"secrets\"} grew by %v, want at least 3", got)
	}
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
	body, err := json.Marshal(&v1alpha1.BulkGetOperation{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "BulkGetOperation"},
		Spec:     v1alpha1.BulkGetOperationSpec{Operations: []v1alpha1.GetOperation{claims}},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client(t, nodeCfg).Post(srv.URL+"/apis/bulk.k8s.io/v1alpha1/bulkgetoperations", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("the node's bulk get of its pod's claim: %d %s, want 201", resp.StatusCode, raw)
	}
}
