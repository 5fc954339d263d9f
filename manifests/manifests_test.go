// Package manifests holds the kustomize tree an operator applies; its
// tests build every kustomization in it with kustomize's library and
// check that kube-apiserver accepts every object, and that the hub run
// with the Deployment's own arguments serves the APIService.
package manifests

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/nodeproxy/nodeproxy/nodeinstall"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

var (
	cp  *controlplane.ControlPlane
	bin string // nodeproxy, run with the Deployment's arguments
)

func TestMain(m *testing.M) {
	os.Exit(testserver.RunTestsWithNodeproxy(m, controlplane.Options{}, &cp, &bin))
}

// kustomizations are every kustomization an operator may apply, with what
// each one's output must hold (kind/name).
var kustomizations = map[string][]string{
	".":                              {"APIService/v1alpha1.bulk.k8s.io", "Deployment/nodeproxy", "Service/nodeproxy", "ClusterRole/nodeproxy:bulk-nodes", "ClusterRole/nodeproxy:authorize"},
	"base":                           {"APIService/v1alpha1.bulk.k8s.io", "Deployment/nodeproxy", "Service/nodeproxy", "Namespace/nodeproxy", "PodDisruptionBudget/nodeproxy"},
	"node":                           {"DaemonSet/nodeproxy-node"},
	"podapi-handover":                {"ClusterRole/nodeproxy:podapi-handover", "ClusterRoleBinding/nodeproxy:podapi-handover"},
	"overlays/authorization-webhook": {"Deployment/nodeproxy", "ClusterRole/nodeproxy:authorize", "ConfigMap/nodeproxy-kube-apiserver-files"},
	"overlays/prometheus": {"Deployment/nodeproxy", "ServiceMonitor/nodeproxy", "PrometheusRule/nodeproxy",
		"ClusterRole/nodeproxy:metrics-reader", "ConfigMap/nodeproxy-grafana-dashboard", "Secret/nodeproxy-node-scrape-config"},
	"overlays/production":     {"Deployment/nodeproxy", "PodDisruptionBudget/nodeproxy"},
	"overlays/sharded":        {"StatefulSet/nodeproxy", "Service/nodeproxy-shards", "Service/nodeproxy", "Certificate/nodeproxy-serving", "PodDisruptionBudget/nodeproxy", "ClusterRoleBinding/nodeproxy:authorize-peers"},
	"overlays/uncached-types": {"Deployment/nodeproxy", "ClusterRole/nodeproxy:uncached-types", "ClusterRoleBinding/nodeproxy:uncached-types"},
	// The kube-proxy component on kube-proxy as kubeadm deploys it.
	"testdata/kube-proxy": {"ConfigMap/kube-proxy", "DaemonSet/kube-proxy", "ClusterRole/nodeproxy:bulk-clients", "ClusterRoleBinding/nodeproxy:bulk-kube-proxy"},
}

func TestEveryKustomizationIsTested(t *testing.T) {
	found, err := filepath.Glob("overlays/*/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append(found, "base/kustomization.yaml", "node/kustomization.yaml", "podapi-handover/kustomization.yaml", "kustomization.yaml") {
		if _, ok := kustomizations[filepath.Dir(f)]; !ok {
			t.Errorf("%s is not in this test's kustomizations: nothing proves it applies", f)
		}
	}
}

// TestKustomizationsListEveryFile: a manifest left out of its
// kustomization.yaml is left out of `kubectl apply -k` without a word.
func TestKustomizationsListEveryFile(t *testing.T) {
	for dir := range kustomizations {
		raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var k struct {
			Resources          []string
			Patches            []struct{ Path string }
			ConfigMapGenerator []struct{ Files []string }
			SecretGenerator    []struct{ Files []string }
		}
		if err := sigsyaml.Unmarshal(raw, &k); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		listed := slices.Clone(k.Resources)
		for _, p := range k.Patches {
			listed = append(listed, p.Path)
		}
		for _, g := range append(k.ConfigMapGenerator, k.SecretGenerator...) {
			for _, f := range g.Files {
				listed = append(listed, f[strings.Index(f, "=")+1:]) // key=file
			}
		}
		for _, pattern := range []string{"*.yaml", "*.json", "*.kubeconfig"} {
			files, _ := filepath.Glob(filepath.Join(dir, pattern))
			for _, f := range files {
				if name := filepath.Base(f); name != "kustomization.yaml" && !slices.Contains(listed, name) {
					t.Errorf("%s is not in %s/kustomization.yaml: `kubectl apply -k` would leave it out", f, dir)
				}
			}
		}
	}
}

// TestEveryKustomizationApplies builds each kustomization and has
// kube-apiserver dry-run a server-side apply of every object: schemas,
// defaults and admission as on a cluster, nothing stored. The Prometheus
// Operator's kinds are served by minimal CRDs installed first
// (testdata/prometheus-operator-crds.yaml), and cert-manager's likewise
// (testdata/cert-manager-crds.yaml), as on a cluster with both.
func TestEveryKustomizationApplies(t *testing.T) {
	ctx := context.Background()
	// monitoring: kube-prometheus's, where the Prometheus overlay puts
	// the node endpoints' scrape configuration for Prometheus to load.
	for _, ns := range []string{"nodeproxy", "monitoring"} {
		if err := cp.EnsureNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	if err := cp.ApplyFiles(ctx, "testdata/prometheus-operator-crds.yaml", "testdata/cert-manager-crds.yaml"); err != nil {
		t.Fatal(err)
	}
	for dir, want := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			path, out := build(t, dir)
			objects := objectsOf(t, out)
			for _, w := range want {
				if !slices.Contains(objects, w) {
					t.Errorf("the built tree lacks %s; it holds %v", w, objects)
				}
			}
			// A CRD's kind is served a moment after the CRD is created.
			testserver.Eventually(t, 30*time.Second, "dry-run apply of "+dir, func(ctx context.Context) error {
				return cp.DryRunApplyFiles(ctx, path)
			})
		})
	}
}

// objectsOf lists the kind/name of every object in a multi-document YAML.
func objectsOf(t *testing.T, out []byte) []string {
	t.Helper()
	var objects []string
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var o struct {
			Kind     string
			Metadata struct{ Name string }
		}
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatal(err)
		}
		objects = append(objects, o.Kind+"/"+o.Metadata.Name)
	}
	return objects
}

// deployment returns the one Deployment a kustomization builds.
func deployment(t *testing.T, dir string) appsv1.Deployment {
	t.Helper()
	_, out := build(t, dir)
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var d appsv1.Deployment
		if err := sigsyaml.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatal(err)
		}
		if d.Kind == "Deployment" {
			return d
		}
	}
	t.Fatalf("%s builds no Deployment", dir)
	return appsv1.Deployment{}
}

// TestAPIServiceAvailableFromTheDeploymentsArguments runs the hub with
// the Deployment's own arguments and registers the base's APIService:
// kube-apiserver must find it Available, verifying the hub against the
// caBundle cert-manager's injector would fill (the harness's serving CA).
// Of the Deployment's arguments, --secure-port is replaced (by a free
// port, as 8443 may be taken on the test machine) and the serving
// certificate's paths are the harness's (the pod's are cert-manager's
// Secret, mounted); the harness adds what a pod has without flags: the
// kubeconfig of its ServiceAccount.
func TestAPIServiceAvailableFromTheDeploymentsArguments(t *testing.T) {
	d := deployment(t, "base")
	args := d.Spec.Template.Spec.Containers[0].Args
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("the Deployment runs %v, want serve", args)
	}
	var kept []string
	for _, a := range args[1:] {
		if !strings.HasPrefix(a, "--secure-port=") && !strings.HasPrefix(a, "--tls-cert-file=") && !strings.HasPrefix(a, "--tls-private-key-file=") {
			kept = append(kept, a)
		}
	}
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	np, err := cp.StartNodeproxy(ctx, bin, ports[0], kept...)
	if err != nil {
		t.Fatalf("nodeproxy serve %v: %v", kept, err)
	}
	t.Cleanup(np.Process.Stop)
	if err := cp.RegisterAPIService(ctx, filepath.Join("base", "apiservice.yaml"), np.Port); err != nil {
		t.Fatal(err)
	}
}

// TestNodeEndpointManifests checks that the DaemonSet's arguments are
// ones `nodeproxy node install` takes.
func TestNodeEndpointManifests(t *testing.T) {
	_, out := build(t, "node")
	var ds appsv1.DaemonSet
	if err := sigsyaml.Unmarshal(out, &ds); err != nil {
		t.Fatal(err)
	}
	args := ds.Spec.Template.Spec.Containers[0].Args
	// The image's entrypoint is nodeproxy-node.
	if len(args) < 1 || args[0] != "install" {
		t.Fatalf("the DaemonSet runs %v, want install", args)
	}
	o := nodeinstall.NewOptions()
	fs := pflag.NewFlagSet("install", pflag.ContinueOnError)
	for _, set := range o.Flags().FlagSets {
		fs.AddFlagSet(set)
	}
	if err := fs.Parse(args[1:]); err != nil {
		t.Fatalf("nodeproxy node install refuses the DaemonSet's arguments: %v", err)
	}
	if image := ds.Spec.Template.Spec.Containers[0].Image; o.Image != image {
		t.Errorf("the static pod would run %s, the DaemonSet runs %s: keep them the same", o.Image, image)
	}
}

// TestProductionHasAMemoryLimitAndASofterGoLimit: the production overlay
// sets the limit docs/operations.md computes, and GOMEMLIMIT under it, so
// that the collector works harder before the kernel kills the pod.
func TestProductionHasAMemoryLimitAndASofterGoLimit(t *testing.T) {
	c := deployment(t, "overlays/production").Spec.Template.Spec.Containers[0]
	limit, request := c.Resources.Limits.Memory(), c.Resources.Requests.Memory()
	if limit.IsZero() || request.IsZero() || request.Cmp(*limit) > 0 {
		t.Fatalf("memory request %s and limit %s: want both, request under limit", request, limit)
	}
	for _, e := range c.Env {
		if e.Name != "GOMEMLIMIT" {
			continue
		}
		soft, err := resource.ParseQuantity(strings.TrimSuffix(e.Value, "B"))
		if err != nil {
			t.Fatalf("GOMEMLIMIT %q: %v", e.Value, err)
		}
		if soft.Cmp(*limit) >= 0 {
			t.Errorf("GOMEMLIMIT %s is not under the limit %s", e.Value, limit)
		}
		return
	}
	t.Error("no GOMEMLIMIT")
}
