package charts

import (
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	sigsyaml "sigs.k8s.io/yaml"
)

// equivalents are the chart's settings for each kustomization under
// manifests/: the chart rendered with values must be, object by object,
// what kustomize builds of dirs together. kustomization ones build only
// what it lists (manifests/node, manifests/podapi-handover), hence the
// base beside them; kinds, if set, keeps only those kinds of a build
// (testdata/kube-proxy builds the cluster's kube-proxy objects too, which
// the chart never renders: it carries the component's RBAC alone).
var equivalents = []struct {
	name   string
	values func(t *testing.T) map[string]any
	dirs   []string
	kinds  map[string][]string // dir: the kinds kept of its build
}{
	{name: "base", values: noValues, dirs: []string{"."}},
	{name: "authorization-webhook", values: yamlValues("authorizationWebhook: {enabled: true}"), dirs: []string{"overlays/authorization-webhook"}},
	{name: "prometheus", values: yamlValues("prometheus: {enabled: true}"), dirs: []string{"overlays/prometheus"}},
	{name: "production", values: fileValues("nodeproxy/values-production.yaml"), dirs: []string{"overlays/production"}},
	{name: "uncached-types", values: yamlValues("hub: {uncachedTypes: true}"), dirs: []string{"overlays/uncached-types"}},
	{name: "sharded", values: yamlValues("sharding: {enabled: true}"), dirs: []string{"overlays/sharded"}},
	{name: "node", values: yamlValues("node: {enabled: true}"), dirs: []string{"base", "node"}},
	{name: "podapi-handover", values: yamlValues("podAPIHandover: {rbac: true}"), dirs: []string{"base", "podapi-handover"}},
	{name: "kube-proxy", values: yamlValues("kubeProxy: {rbac: true}"), dirs: []string{"base", "testdata/kube-proxy"},
		kinds: map[string][]string{"testdata/kube-proxy": {"ClusterRole", "ClusterRoleBinding"}}},
}

func noValues(*testing.T) map[string]any { return map[string]any{} }

func yamlValues(doc string) func(t *testing.T) map[string]any {
	return func(t *testing.T) map[string]any { return valuesOf(t, doc) }
}

func fileValues(path string) func(t *testing.T) map[string]any {
	return func(t *testing.T) map[string]any { return valuesFile(t, path) }
}

// TestEveryKustomizationHasAChartEquivalent: an overlay added under
// manifests/ without its values here would be a way to install nodeproxy
// that the chart does not offer, or offers untested.
func TestEveryKustomizationHasAChartEquivalent(t *testing.T) {
	found, err := filepath.Glob(filepath.Join(manifestsDir, "*", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	overlays, err := filepath.Glob(filepath.Join(manifestsDir, "overlays", "*", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	covered := map[string]bool{"base": true} // in every equivalent
	for _, e := range equivalents {
		for _, d := range e.dirs {
			covered[d] = true
		}
	}
	for _, f := range append(found, overlays...) {
		dir, _ := filepath.Rel(manifestsDir, filepath.Dir(f))
		if !covered[dir] {
			t.Errorf("manifests/%s has no chart equivalent in this test: add the values that render it", dir)
		}
	}
}

// TestChartRendersWhatKustomizeBuilds renders the chart, as `helm
// template` does, with the values of each kustomization and compares the
// objects with kustomize's build of it, object by object. Three differences
// are allowed, and only these:
//   - the Namespace: manifests/base creates nodeproxy, the chart renders
//     into the release's namespace (helm install --create-namespace), as
//     a release that held its own namespace would delete its own record
//     with it;
//   - kube-apiserver's files in the ConfigMap nodeproxy-kube-apiserver-files
//     compare as YAML documents: the chart templates them from its values,
//     with shorter comments;
//   - a Secret's base64 data compares without line breaks, which
//     kustomize's generator wraps it with and Helm's b64enc does not.
//
// Labels are equal: the chart adds none of Helm's customary ones, so that
// the objects are kustomize's.
func TestChartRendersWhatKustomizeBuilds(t *testing.T) {
	for _, e := range equivalents {
		t.Run(e.name, func(t *testing.T) {
			manifest, err := renderChart(t, e.values(t))
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			got := index(t, decode(t, manifest))
			want := map[string]object{}
			for _, dir := range e.dirs {
				for _, o := range kustomizeBuild(t, dir) {
					if kinds, ok := e.kinds[dir]; ok && !slices.Contains(kinds, o["kind"].(string)) {
						continue
					}
					if o["kind"] == "Namespace" {
						continue
					}
					want[key(o)] = normalize(o)
				}
			}
			for k, w := range want {
				g, ok := got[k]
				if !ok {
					t.Errorf("the chart does not render %s", k)
					continue
				}
				if diff := cmp.Diff(w, g); diff != "" {
					t.Errorf("%s differs (-kustomize +chart):\n%s", k, diff)
				}
			}
			for k := range got {
				if _, ok := want[k]; !ok {
					t.Errorf("the chart renders %s, which kustomize does not build", k)
				}
			}
		})
	}
}

// index keys objects by key, refusing two of one name.
func index(t *testing.T, objects []object) map[string]object {
	t.Helper()
	m := map[string]object{}
	for _, o := range objects {
		k := key(o)
		if _, dup := m[k]; dup {
			t.Errorf("the chart renders %s twice", k)
		}
		m[k] = normalize(o)
	}
	return m
}

// normalize rewrites kube-apiserver's files as documents, and a Secret's
// base64 data without the line breaks kustomize wraps it at (see
// TestChartRendersWhatKustomizeBuilds).
func normalize(o object) object {
	md, _ := o["metadata"].(map[string]any)
	data, _ := o["data"].(map[string]any)
	for k, v := range data {
		s, _ := v.(string)
		switch {
		case o["kind"] == "Secret":
			data[k] = strings.Join(strings.Fields(s), "")
		case o["kind"] == "ConfigMap" && md["name"] == "nodeproxy-kube-apiserver-files":
			var doc any
			if err := sigsyaml.Unmarshal([]byte(s), &doc); err == nil {
				data[k] = doc
			}
		}
	}
	return o
}

// TestChartDefaultsToMakeImagesImages: the default values run the images
// `make image` builds and tags (hack/image: <binary>:dev), as the
// kustomize tree does, and the DaemonSet's static pod runs its own image.
func TestChartDefaultsToMakeImagesImages(t *testing.T) {
	manifest, err := renderChart(t, valuesOf(t, "node: {enabled: true}"))
	if err != nil {
		t.Fatal(err)
	}
	var images []string
	for _, o := range decode(t, manifest) {
		if o["kind"] != "Deployment" && o["kind"] != "DaemonSet" {
			continue
		}
		spec := o["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		for _, c := range spec["containers"].([]any) {
			c := c.(map[string]any)
			images = append(images, c["image"].(string))
			for _, a := range c["args"].([]any) {
				if s := a.(string); strings.HasPrefix(s, "--image=") {
					images = append(images, strings.TrimPrefix(s, "--image="))
				}
			}
		}
	}
	sort.Strings(images)
	if want := []string{"nodeproxy-node:dev", "nodeproxy-node:dev", "nodeproxy:dev"}; !slices.Equal(images, want) {
		t.Errorf("the chart runs %v, want make image's %v", images, want)
	}
}
