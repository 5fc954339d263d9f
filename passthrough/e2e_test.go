package passthrough_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// The end-to-end tests run kube-apiserver as the manifests configure it
// (nodeproxy's webhook for node identities, then RBAC) and one nodeproxy
// with --bulk-uncached-types and the grant of
// manifests/components/uncached-types, shared by every test.

var (
	cp     *controlplane.ControlPlane
	npPort int

	hubOnce sync.Once
	hub     *testserver.Server
	// counts is the aggregated API the tests read (aggregated_test.go).
	counts *countsServer
)

const (
	bulkPath = "/apis/bulk.k8s.io/v1alpha1/bulkgetoperations"
	ns       = "passthrough-e2e"
)

func TestMain(m *testing.M) { os.Exit(testserver.RunBehindWebhook(m, &cp, &npPort)) }

// startHub starts the package's nodeproxy once; it lives until the
// control plane stops.
func startHub(t testing.TB) *testserver.Server {
	t.Helper()
	hubOnce.Do(func() {
		root, err := controlplane.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		testserver.InstallRBAC(t, cp, "rbac-webhook.yaml", "rbac-bulk.yaml")
		if err := cp.ApplyFiles(context.Background(), filepath.Join(root, "manifests", "components", "uncached-types", "rbac-impersonate.yaml")); err != nil {
			t.Fatal(err)
		}
		// Not testserver.Start's cleanup: the hub outlives this test, and
		// ends with the test binary.
		hub = testserver.Start(&keepAlive{TB: t}, cp, testserver.Options{Port: npPort, Args: []string{"--bulk-uncached-types"}})
		hub.WaitReady(t, 90*time.Second)
		if err := cp.RegisterAPIService(context.Background(), testserver.Manifest(t, "apiservice.yaml"), npPort); err != nil {
			t.Fatal(err)
		}
		seed(t)
	})
	if hub == nil {
		t.Fatal("the hub did not start (see the first test's failure)")
	}
	return hub
}

// keepAlive is a testing.TB whose cleanups never run: the package's hub
// is shared by every test.
type keepAlive struct{ testing.TB }

func (k *keepAlive) Cleanup(func()) {}

// TempDir outlives the test as well: the hub reads its kubeconfig and
// serving certificate from it.
func (k *keepAlive) TempDir() string {
	dir, err := os.MkdirTemp("", "passthrough-hub-")
	if err != nil {
		k.Fatal(err)
	}
	return dir
}

// seed creates, before any CRD exists: a configmap (cached), a
// Deployment (apps/v1: not cached), and the Widget CRD only after the
// hub has started, so that finding it proves discovery is asked again.
func seed(t testing.TB) {
	ctx := context.Background()
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	if _, err := admin.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	crd := filepath.Join(dir, "crd.yaml")
	if err := os.WriteFile(crd, []byte(widgetCRD), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cp.ApplyFiles(ctx, crd); err != nil {
		t.Fatal(err)
	}
	widget := filepath.Join(dir, "widget.yaml")
	if err := os.WriteFile(widget, []byte(fmt.Sprintf(widgetCR, ns)), 0o600); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 30*time.Second, "the Widget CRD served", func(ctx context.Context) error {
		return cp.ApplyFiles(ctx, widget)
	})
	counts = startCounts(t, "visits")
	// alice may read the four types in ns; bob all but Deployments and
	// counts.
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"bulkgetoperations"}, Verbs: []string{"create", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"e2e.nodeproxy.io"}, Resources: []string{"widgets"}, Verbs: []string{"list", "watch"}},
	}
	grant(t, admin, "bob", rules)
	grant(t, admin, "alice", append(rules,
		rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{countsGroup}, Resources: []string{"counts"}, Verbs: []string{"list", "watch"}}))
}

const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.e2e.nodeproxy.io
spec:
  group: e2e.nodeproxy.io
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`

const widgetCR = `apiVersion: e2e.nodeproxy.io/v1
kind: Widget
metadata: {name: gear, namespace: %s}
spec: {teeth: 12}
`

// grant lets user create bulk gets and follow rules: a ClusterRole, bound
// in ns only (bulkgetoperations, cluster-scoped, by a ClusterRoleBinding
// of its own would be cleaner; one RoleBinding is enough here because
// kube-apiserver checks create on bulkgetoperations cluster-wide).
func grant(t testing.TB, admin kubernetes.Interface, user string, rules []rbacv1.PolicyRule) {
	ctx := context.Background()
	name := "passthrough-e2e-" + user
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: ref, Subjects: subjects}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// endpoint is one way to reach bulk.k8s.io as some identity.
type endpoint struct {
	name   string
	url    string
	client *http.Client
}

// endpoints reaches the hub as cfg's identity both ways: directly over
// mTLS, and through kube-apiserver's aggregator (the front proxy's
// headers carry the identity).
func endpoints(t *testing.T, srv *testserver.Server, cfg *rest.Config) []endpoint {
	t.Helper()
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return []endpoint{
		{"direct mTLS", srv.URL + bulkPath, srv.Client(t, cfg)},
		{"through kube-apiserver", cfg.Host + bulkPath, c},
	}
}

func (e endpoint) post(t *testing.T, ops ...string) (int, []resultList, *metav1.Status) {
	t.Helper()
	body := `{"apiVersion":"bulk.k8s.io/v1alpha1","kind":"BulkGetOperation","spec":{"operations":[` + strings.Join(ops, ",") + `]}}`
	resp, err := e.client.Post(e.url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("%s: %v", e.name, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode >= 300 {
		var status metav1.Status
		if err := json.Unmarshal(raw, &status); err != nil || status.Kind != "Status" {
			t.Fatalf("%s: %d without a Status: %s", e.name, resp.StatusCode, raw)
		}
		return resp.StatusCode, nil, &status
	}
	var out v1alpha1.BulkGetOperation
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: %v: %s", e.name, err, raw)
	}
	lists := make([]resultList, len(out.Status.Results))
	for i, r := range out.Status.Results {
		if err := json.Unmarshal(r.Raw, &lists[i]); err != nil {
			t.Fatalf("%s: result %d: %v", e.name, i, err)
		}
	}
	return resp.StatusCode, lists, nil
}

type resultList struct {
	Kind     string
	Metadata metav1.ListMeta
	Items    []struct{ Metadata metav1.ObjectMeta }
}

func (l resultList) String() string {
	s := l.Kind + ":"
	for _, it := range l.Items {
		s += " " + it.Metadata.Name
	}
	return s
}

func op(group, version, resource, namespace string) string {
	return fmt.Sprintf(`{"resource":{"group":%q,"version":%q,"resource":%q},"namespace":%q}`, group, version, resource, namespace)
}

var (
	configmaps  = op("", "v1", "configmaps", ns)
	deployments = op("apps", "v1", "deployments", ns)
	widgets     = op("e2e.nodeproxy.io", "v1", "widgets", ns)
	countsOp    = op(countsGroup, countsVersion, "counts", ns)
)
