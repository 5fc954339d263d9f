package get_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/bulke2e"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// The end-to-end tests run kube-apiserver and nodeproxy as bulke2e
// describes, one control plane for this package.

var (
	cp     *controlplane.ControlPlane
	npPort int
)

func TestMain(m *testing.M) { os.Exit(testserver.RunBehindWebhook(m, &cp, &npPort)) }

// names decodes result i as a list and returns "kind: name name ...".
func names(t testing.TB, out *v1alpha1.BulkGetOperation, i int) string {
	t.Helper()
	var list struct {
		Kind     string `json:"kind"`
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(out.Status.Results[i].Raw, &list); err != nil {
		t.Fatalf("result %d: %v", i, err)
	}
	if list.Metadata.ResourceVersion == "" {
		t.Errorf("result %d (%s) has no resourceVersion", i, list.Kind)
	}
	var b bytes.Buffer
	b.WriteString(list.Kind + ":")
	for _, it := range list.Items {
		b.WriteString(" " + it.Metadata.Name)
	}
	return b.String()
}

func TestBulkGetEndToEnd(t *testing.T) {
	srv := bulke2e.StartNodeproxy(t, cp, npPort)
	ns := bulke2e.Workload(t, cp)
	nodeA, err := cp.NodeConfig("node-a")
	if err != nil {
		t.Fatal(err)
	}
	admin := cp.AdminConfig()

	mine := bulke2e.Request(bulke2e.Op("secrets", ns, "metadata.name=secret-a"), bulke2e.Op("configmaps", ns, "metadata.name=cm-a"), bulke2e.Op("pods", ns, "spec.nodeName=node-a"))
	// The cache trails kube-apiserver by a watch delivery: wait until
	// nodeproxy has pod a.
	testserver.Eventually(t, 30*time.Second, "node-a's pod in the cache", func(context.Context) error {
		code, out, status := bulke2e.Direct(t, srv, admin).Post(t, bulke2e.Request(bulke2e.Op("pods", ns, "metadata.name=a")))
		if code != http.StatusCreated {
			return fmt.Errorf("%d %v", code, status)
		}
		if got := names(t, out, 0); got != "PodList: a" {
			return errors.New(got)
		}
		return nil
	})

	for _, e := range []bulke2e.Endpoint{bulke2e.Direct(t, srv, nodeA), bulke2e.ThroughKubeAPIServer(t, nodeA)} {
		t.Run("node-a gets its pod's secret, configmap and its pods, "+e.Name, func(t *testing.T) {
			code, out, status := e.Post(t, mine)
			if code != http.StatusCreated {
				t.Fatalf("%d: %v", code, status)
			}
			if out.ManagedFields != nil {
				t.Errorf("the answer carries managedFields: %v", out.ManagedFields)
			}
			want := []string{"SecretList: secret-a", "ConfigMapList: cm-a", "PodList: a"}
			if len(out.Status.Results) != len(want) {
				t.Fatalf("%d results, want %d", len(out.Status.Results), len(want))
			}
			for i, w := range want {
				if got := names(t, out, i); got != w {
					t.Errorf("result %d = %q, want %q", i, got, w)
				}
			}
		})
		t.Run("node-a is refused node-b's secret, "+e.Name, func(t *testing.T) {
			code, out, status := e.Post(t, bulke2e.Request(bulke2e.Op("secrets", ns, "metadata.name=secret-a"), bulke2e.Op("secrets", ns, "metadata.name=secret-b")))
			if code != http.StatusForbidden || out != nil {
				t.Fatalf("%d, %v: want 403 and nothing else", code, out)
			}
			if !strings.Contains(status.Message, "spec.operations[1]") || !strings.Contains(status.Message, "secret-b") {
				t.Errorf("the refusal does not name operation 1 and secret-b: %s", status.Message)
			}
		})
		t.Run("node-a is refused every secret of the namespace, "+e.Name, func(t *testing.T) {
			code, _, status := e.Post(t, bulke2e.Request(bulke2e.Op("secrets", ns, "")))
			if code != http.StatusForbidden {
				t.Fatalf("%d: %v", code, status)
			}
		})
		t.Run("node-a gets every secret it reaches, "+e.Name, func(t *testing.T) {
			code, out, status := e.Post(t, bulke2e.Request(bulke2e.Op("secrets", "", "bulk.k8s.io/reachableFrom=node-a"), bulke2e.Op("nodes", "", "bulk.k8s.io/reachableFrom=node-b")))
			if code != http.StatusForbidden || !strings.Contains(status.Message, "spec.operations[1]") {
				t.Fatalf("asking for node-b's objects: %d %v %v", code, out, status)
			}
			code, out, status = e.Post(t, bulke2e.Request(bulke2e.Op("secrets", ns, "bulk.k8s.io/reachableFrom=node-a")))
			if code != http.StatusCreated {
				t.Fatalf("%d: %v", code, status)
			}
			if got := names(t, out, 0); got != "SecretList: secret-a" {
				t.Errorf("reachable secrets = %q", got)
			}
		})
	}

	for _, e := range []bulke2e.Endpoint{bulke2e.Direct(t, srv, admin), bulke2e.ThroughKubeAPIServer(t, admin)} {
		t.Run("an admin lists any mix, "+e.Name, func(t *testing.T) {
			code, out, status := e.Post(t, bulke2e.Request(bulke2e.Op("secrets", ns, ""), bulke2e.Op("pods", ns, ""), bulke2e.Op("configmaps", ns, "metadata.name!=cm-a"),
				`{"resource":{"group":"","version":"v1","resource":"secrets"},"namespace":"`+ns+`","options":{"labelSelector":"app=b"}}`))
			if code != http.StatusCreated {
				t.Fatalf("%d: %v", code, status)
			}
			want := []string{"SecretList: secret-a secret-b", "PodList: a b", "ConfigMapList: cm-b", "SecretList: secret-b"}
			for i, w := range want {
				if got := names(t, out, i); got != w {
					t.Errorf("result %d = %q, want %q", i, got, w)
				}
			}
		})
	}

	t.Run("bad input gets a Status naming the operation and the problem", func(t *testing.T) {
		e := bulke2e.Direct(t, srv, nodeA)
		code, out, status := e.Post(t, bulke2e.Request(bulke2e.Op("secrets", ns, "metadata.name=secret-a"), bulke2e.Op("endpoints", ns, "")))
		if code != http.StatusUnprocessableEntity || out != nil {
			t.Fatalf("unknown resource: %d %v", code, out)
		}
		if status.Details == nil || len(status.Details.Causes) != 1 || status.Details.Causes[0].Field != "spec.operations[1].resource" {
			t.Errorf("unknown resource: causes %+v", status.Details)
		}
		code, _, status = e.Post(t, bulke2e.Request(bulke2e.Op("secrets", ns, "metadata.name=")+`,`+bulke2e.Op("nodes", ns, "")))
		if code != http.StatusUnprocessableEntity || len(status.Details.Causes) != 1 || status.Details.Causes[0].Field != "spec.operations[1].namespace" {
			t.Errorf("namespace on nodes: %d %+v", code, status.Details)
		}
		code, _, status = e.Post(t, `{"apiVersion":"bulk.k8s.io/v1alpha1","kind":"BulkGetOperation","spec":{"operations":[`)
		if code != http.StatusBadRequest {
			t.Errorf("truncated JSON: %d %v", code, status)
		}
		code, _, status = e.Post(t, bulke2e.Request(bulke2e.Op("secrets", ns, "metadata.name="+strings.Repeat("x", 2<<20))))
		if code != http.StatusRequestEntityTooLarge {
			t.Errorf("a 2 MiB body: %d %v", code, status)
		}
	})

	t.Run("a user without RBAC is refused, naming the operation", func(t *testing.T) {
		cfg, err := cp.UserConfig("bulk-e2e-nobody")
		if err != nil {
			t.Fatal(err)
		}
		code, _, status := bulke2e.Direct(t, srv, cfg).Post(t, bulke2e.Request(bulke2e.Op("secrets", ns, "metadata.name=secret-a")))
		if code != http.StatusForbidden {
			t.Fatalf("%d: %v", code, status)
		}
	})

	// kubectl's validation looks for a PATCH operation of the kind in the
	// OpenAPI to learn whether server-side field validation applies; a
	// create-only resource has none, so kubectl falls back to asking
	// whether the kind is a CRD, which a node may not list
	// (k8s.io/cli-runtime query_param_verifier.go). An admin validates;
	// a node passes --validate=false (docs/api.md says so).
	for _, tc := range []struct {
		who  string
		cfg  *rest.Config
		args []string
	}{
		{"an admin", admin, nil},
		{"node-a", nodeA, []string{"--validate=false"}},
	} {
		t.Run("kubectl create -f through kube-apiserver as "+tc.who, func(t *testing.T) {
			out := kubectlCreate(t, tc.cfg, ns, tc.args...)
			for _, want := range []string{"kind: BulkGetOperation", "kind: SecretList", "name: secret-a", "kind: PodList", "nodeName: node-a"} {
				if !strings.Contains(out, want) {
					t.Errorf("kubectl output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

// kubectlCreate runs kubectl create -f -o yaml as cfg with the bulk get
// of docs/api.md: a secret by name, and node-a's pods.
func kubectlCreate(t *testing.T, cfg *rest.Config, ns string, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := controlplane.WriteKubeconfig(cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	opFile := filepath.Join(dir, "op.yaml")
	yamlOp := fmt.Sprintf(`apiVersion: bulk.k8s.io/v1alpha1
kind: BulkGetOperation
spec:
  operations:
  - resource: {group: "", version: v1, resource: secrets}
    namespace: %s
    options: {fieldSelector: metadata.name=secret-a}
  - resource: {group: "", version: v1, resource: pods}
    options: {fieldSelector: spec.nodeName=node-a}
`, ns)
	if err := os.WriteFile(opFile, []byte(yamlOp), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tool(t, "kubectl"), append([]string{"--kubeconfig", kubeconfig, "--cache-dir", filepath.Join(dir, "cache"),
		"create", "-f", opFile, "-o", "yaml"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	return string(out)
}

func tool(t *testing.T, name string) string {
	t.Helper()
	paths, err := controlplane.EnsureTools(context.Background(), os.Stderr, name)
	if err != nil {
		t.Fatal(err)
	}
	return paths[name]
}
