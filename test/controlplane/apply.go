package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// ApplyFiles server-side-applies every object in the YAML files, as the
// admin, the way `kubectl apply --server-side -f` would. Tests use it to
// install the very manifests an operator installs.
func (cp *ControlPlane) ApplyFiles(ctx context.Context, paths ...string) error {
	return cp.applyFiles(ctx, false, paths...)
}

// DryRunApplyFiles is ApplyFiles with server-side dry-run: kube-apiserver
// decodes, defaults, validates and admits every object as it would apply
// it (schemas, immutable fields, CRD kinds it does not serve), and stores
// nothing. Tests use it for manifests that would start real workloads.
func (cp *ControlPlane) DryRunApplyFiles(ctx context.Context, paths ...string) error {
	return cp.applyFiles(ctx, true, paths...)
}

func (cp *ControlPlane) applyFiles(ctx context.Context, dryRun bool, paths ...string) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cp.admin)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cp.admin)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("open manifest: %w", err)
		}
		err = applyStream(ctx, f, mapper, dyn, dryRun)
		f.Close()
		if err != nil {
			return fmt.Errorf("apply %s: %w", path, err)
		}
	}
	return nil
}

func applyStream(ctx context.Context, r io.Reader, mapper *restmapper.DeferredDiscoveryRESTMapper, dyn dynamic.Interface, dryRun bool) error {
	opts := metav1.ApplyOptions{FieldManager: "nodeproxy-test", Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("decode: %w", err)
		}
		if len(obj.Object) == 0 {
			continue // an empty document between two ---
		}
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("map %s: %w", gvk, err)
		}
		client := dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
		if _, err := client.Apply(ctx, obj.GetName(), obj, opts); err != nil {
			return fmt.Errorf("%s %s/%s: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
		}
	}
}
