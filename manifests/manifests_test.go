// Package manifests holds the kustomize tree an operator applies; its test
// checks that the tree builds and that kube-apiserver accepts every object.
package manifests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/nodeproxy/nodeproxy/internal/controlplane"
	"github.com/nodeproxy/nodeproxy/internal/testserver"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) { os.Exit(testserver.RunTests(m, controlplane.Options{}, &cp)) }

// notApplied are files here that are not cluster objects.
var notApplied = []string{"kustomization.yaml", "kube-apiserver-authorization-config.yaml"}

func TestKustomizationListsEveryManifest(t *testing.T) {
	raw, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct{ Resources []string }
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !slices.Contains(notApplied, f) && !slices.Contains(k.Resources, f) {
			t.Errorf("%s is not in kustomization.yaml: `kubectl apply -k` would leave it out", f)
		}
	}
}

// TestKustomizationApplies builds the tree with kubectl kustomize, as
// `kubectl apply -k manifests/` does, and applies the result to a real
// kube-apiserver.
func TestKustomizationApplies(t *testing.T) {
	tools, err := controlplane.EnsureTools(context.Background(), os.Stderr, "kubectl")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tools["kubectl"], "kustomize", ".").Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v", err)
	}
	for _, kind := range []string{"kind: APIService", "kind: Deployment", "kind: Service", "name: nodeproxy:bulk-nodes", "name: nodeproxy:authorize"} {
		if !strings.Contains(string(out), kind) {
			t.Errorf("the built tree lacks %q", kind)
		}
	}
	rendered := filepath.Join(t.TempDir(), "nodeproxy.yaml")
	if err := os.WriteFile(rendered, out, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cp.ApplyFiles(context.Background(), rendered); err != nil {
		t.Fatalf("kube-apiserver refused the built tree: %v", err)
	}
}
