package charts

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	release "helm.sh/helm/v4/pkg/release/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

const (
	chartDir     = "nodeproxy"
	manifestsDir = "../manifests"
	// releaseName and namespace are those docs/operations.md installs
	// with: the namespace manifests/base hard-codes.
	releaseName = "nodeproxy"
	namespace   = "nodeproxy"
)

// kubeVersion is the harness's kube-apiserver; Helm's library defaults
// to 1.20 in test binaries, under the chart's kubeVersion.
var kubeVersion = must(common.ParseKubeVersion("v1.36.3"))

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// object is one rendered or built object, decoded as JSON decodes it, so
// that both sides' numbers and strings compare alike.
type object = map[string]any

// key names an object as kube-apiserver does: group/version, kind,
// namespace, name.
func key(o object) string {
	md, _ := o["metadata"].(map[string]any)
	return fmt.Sprintf("%v %v %v/%v", o["apiVersion"], o["kind"], md["namespace"], md["name"])
}

// decode splits a multi-document YAML stream into objects, skipping
// empty documents (a template that renders nothing).
func decode(t *testing.T, stream string) []object {
	t.Helper()
	var objects []object
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(stream), 4096)
	for {
		var o object
		if err := dec.Decode(&o); err == io.EOF {
			return objects
		} else if err != nil {
			t.Fatalf("decode: %v\n%s", err, stream)
		}
		if len(o) > 0 {
			objects = append(objects, roundTrip(t, o))
		}
	}
}

// roundTrip passes o through JSON, so that every number is a float64
// whichever decoder produced it.
func roundTrip(t *testing.T, o object) object {
	t.Helper()
	raw, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	var out object
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// renderChart renders the chart with vals as `helm template --namespace
// nodeproxy nodeproxy charts/nodeproxy` does (Helm's install action,
// client-only dry run: schema validation, templates, no cluster).
func renderChart(t *testing.T, vals map[string]any) (string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load the chart: %v", err)
	}
	cfg := action.NewConfiguration()
	cfg.SetLogger(slog.DiscardHandler)
	install := action.NewInstall(cfg)
	install.DryRunStrategy = action.DryRunClient
	install.Replace = true
	install.ReleaseName = releaseName
	install.Namespace = namespace
	install.KubeVersion = kubeVersion
	rel, err := install.RunWithContext(context.Background(), ch, vals)
	if err != nil {
		return "", err
	}
	return rel.(*release.Release).Manifest, nil
}

// valuesOf reads YAML values as `helm --values` does.
func valuesOf(t *testing.T, doc string) map[string]any {
	t.Helper()
	vals, err := common.ReadValues([]byte(doc))
	if err != nil {
		t.Fatalf("values %q: %v", doc, err)
	}
	return vals
}

// valuesFile reads a values file as `helm --values file` does.
func valuesFile(t *testing.T, path string) map[string]any {
	t.Helper()
	vals, err := common.ReadValuesFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return vals
}

// kustomizeBuild builds the kustomization in manifests/dir as
// `kubectl apply -k` does, with kustomize as a library.
func kustomizeBuild(t *testing.T, dir string) []object {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join(manifestsDir, dir))
	if err != nil {
		t.Fatal(err)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), abs)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return decode(t, string(out))
}
