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

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodeproxy/nodeproxy/internal/controlplane"
	"github.com/nodeproxy/nodeproxy/internal/testserver"
	"github.com/nodeproxy/nodeproxy/nodeinstall"
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
	out := buildAndApply(t, ".")
	for _, kind := range []string{"kind: APIService", "kind: Deployment", "kind: Service", "name: nodeproxy:bulk-nodes", "name: nodeproxy:authorize"} {
		if !strings.Contains(string(out), kind) {
			t.Errorf("the built tree lacks %q", kind)
		}
	}
}

// buildAndApply builds the kustomization in dir with kubectl kustomize,
// as `kubectl apply -k` does, applies it to the test's kube-apiserver and
// returns what it built.
func buildAndApply(t *testing.T, dir string) []byte {
	t.Helper()
	tools, err := controlplane.EnsureTools(context.Background(), os.Stderr, "kubectl")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tools["kubectl"], "kustomize", dir).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	rendered := filepath.Join(t.TempDir(), "built.yaml")
	if err := os.WriteFile(rendered, out, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cp.ApplyFiles(context.Background(), rendered); err != nil {
		t.Fatalf("kube-apiserver refused %s: %v", dir, err)
	}
	return out
}

// TestNodeEndpointManifests builds manifests/node, which an operator
// applies on its own, applies it to a real kube-apiserver, and checks
// that the DaemonSet's arguments are ones `nodeproxy node install` takes.
func TestNodeEndpointManifests(t *testing.T) {
	if err := cp.EnsureNamespace(context.Background(), "nodeproxy"); err != nil {
		t.Fatal(err)
	}
	out := buildAndApply(t, "node")
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal(out, &ds); err != nil {
		t.Fatal(err)
	}
	args := ds.Spec.Template.Spec.Containers[0].Args
	if len(args) < 2 || args[0] != "node" || args[1] != "install" {
		t.Fatalf("the DaemonSet runs %v, want node install", args)
	}
	o := nodeinstall.NewOptions()
	fs := pflag.NewFlagSet("install", pflag.ContinueOnError)
	for _, set := range o.Flags().FlagSets {
		fs.AddFlagSet(set)
	}
	if err := fs.Parse(args[2:]); err != nil {
		t.Fatalf("nodeproxy node install refuses the DaemonSet's arguments: %v", err)
	}
	if image := ds.Spec.Template.Spec.Containers[0].Image; o.Image != image {
		t.Errorf("the static pod would run %s, the DaemonSet runs %s: keep them the same", o.Image, image)
	}
}
