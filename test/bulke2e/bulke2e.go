// Package bulke2e is the harness the bulk packages' end-to-end tests share:
// kube-apiserver as the manifests configure it (nodeproxy's webhook for
// node identities, then RBAC), nodeproxy in-process on a fixed port, and
// bulk.k8s.io registered with the aggregator through an ExternalName
// Service to localhost. Each test package runs its own control plane
// (testserver.RunBehindWebhook in its TestMain). Only tests import it.
package bulke2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// Path is where the bulk get is served.
const Path = "/apis/bulk.k8s.io/v1alpha1/bulkgetoperations"

var runs atomic.Int32

// Namespace is a fresh namespace name: prefix and a number.
func Namespace(prefix string) string { return fmt.Sprintf("%s-%d", prefix, runs.Add(1)) }

// StartNodeproxy runs nodeproxy on port with the manifests' RBAC and
// registers manifests/apiservice.yaml, pointed at it, with cp's
// kube-apiserver.
func StartNodeproxy(t testing.TB, cp *controlplane.ControlPlane, port int) *testserver.Server {
	t.Helper()
	testserver.InstallRBAC(t, cp, "rbac-webhook.yaml", "rbac-bulk.yaml")
	srv := testserver.Start(t, cp, testserver.Options{Port: port})
	srv.WaitReady(t, 90*time.Second)
	if err := cp.RegisterAPIService(context.Background(), testserver.Manifest(t, "apiservice.yaml"), port); err != nil {
		t.Fatal(err)
	}
	return srv
}

// Workload makes a namespace in which pod a on node-a uses secret-a and
// cm-a, and pod b on node-b uses secret-b and cm-b, and returns its name.
func Workload(t *testing.T, cp *controlplane.ControlPlane) string {
	t.Helper()
	ctx := context.Background()
	ns := Namespace("bulk-e2e")
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	for _, n := range []string{"a", "b"} {
		if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "secret-" + n, Labels: map[string]string{"app": n}},
			Data:       map[string][]byte{"password": []byte("pw-" + n)},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: n},
			Spec: corev1.PodSpec{
				NodeName:   "node-" + n,
				Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
				Volumes: []corev1.Volume{
					{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "secret-" + n}}},
					{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm-" + n}}}},
				},
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return ns
}

// Endpoint is one way to reach bulk.k8s.io as some identity.
type Endpoint struct {
	Name   string
	url    string
	client *http.Client
}

// ThroughKubeAPIServer reaches the bulk get through kube-apiserver's
// aggregator, as cfg.
func ThroughKubeAPIServer(t testing.TB, cfg *rest.Config) Endpoint {
	t.Helper()
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return Endpoint{"through kube-apiserver", cfg.Host + Path, c}
}

// Direct reaches srv's bulk get over mTLS, as cfg.
func Direct(t testing.TB, srv *testserver.Server, cfg *rest.Config) Endpoint {
	return Endpoint{"direct mTLS", srv.URL + Path, srv.Client(t, cfg)}
}

// Post sends a bulk get and returns its status code and the operation
// answered, or the Status of a refusal.
func (e Endpoint) Post(t testing.TB, body string) (int, *v1alpha1.BulkGetOperation, *metav1.Status) {
	t.Helper()
	resp, err := e.client.Post(e.url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("%s: %v", e.Name, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode >= 300 {
		var status metav1.Status
		if err := json.Unmarshal(raw, &status); err != nil || status.Kind != "Status" {
			t.Fatalf("%s: %d without a Status: %s", e.Name, resp.StatusCode, raw)
		}
		return resp.StatusCode, nil, &status
	}
	var out v1alpha1.BulkGetOperation
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: %v: %s", e.Name, err, raw)
	}
	return resp.StatusCode, &out, nil
}

// Op writes one operation as JSON.
func Op(resource, namespace, fieldSelector string) string {
	return fmt.Sprintf(`{"resource":{"group":"","version":"v1","resource":%q},"namespace":%q,"options":{"fieldSelector":%q}}`,
		resource, namespace, fieldSelector)
}

// Request writes a BulkGetOperation of ops as JSON.
func Request(ops ...string) string {
	return `{"apiVersion":"bulk.k8s.io/v1alpha1","kind":"BulkGetOperation","spec":{"operations":[` + strings.Join(ops, ",") + `]}}`
}
