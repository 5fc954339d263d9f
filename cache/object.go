package cache

import (
	"cmp"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Object is one version of one cached object. It is immutable once a
// store has published it: readers on any goroutine may hold it for as long
// as they like, and the next version is a new Object.
//
// The key fields repeat the object's own metadata only as string headers
// (the bytes are shared), so the indexes cost a pointer per object, not a
// copy of it.
type Object struct {
	Namespace string
	Name      string
	// NodeName is spec.nodeName of a pod; empty for every other type.
	NodeName string
	// RV is metadata.resourceVersion as a number: kube-apiserver's
	// resourceVersions are etcd revisions, so they order all changes.
	RV     uint64
	Labels map[string]string
	// Obj is the typed object as kube-apiserver sent it, without
	// metadata.managedFields and without apiVersion/kind.
	Obj runtime.Object
}

// newObject takes ownership of obj: it strips managedFields and the type
// meta (so that encoding can prefix its own, see encode.go) and reads the
// key fields.
func newObject(obj interface{}) (*Object, error) {
	ro, ok := obj.(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("%T is not an API object", obj)
	}
	accessor, err := meta.Accessor(ro)
	if err != nil {
		return nil, fmt.Errorf("%T has no object metadata: %w", obj, err)
	}
	rv, err := parseRV(accessor.GetResourceVersion())
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", accessor.GetNamespace(), accessor.GetName(), err)
	}
	accessor.SetManagedFields(nil)
	ro.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	o := &Object{RV: rv, Obj: ro}
	o.readKeys(accessor)
	return o, nil
}

// readKeys points the key fields at the object's own metadata.
func (o *Object) readKeys(accessor metav1.Object) {
	o.Namespace, o.Name, o.Labels = accessor.GetNamespace(), accessor.GetName(), accessor.GetLabels()
	if pod, ok := o.Obj.(*corev1.Pod); ok {
		o.NodeName = pod.Spec.NodeName
	}
}

// slim makes o, a version not yet published, hold as little as it can:
// what it holds unchanged of prev (the version it follows, or nil) is
// prev's, key fields included, and its lists are cut to length
// (slimVersion).
func (o *Object) slim(prev *Object) {
	var p any
	if prev != nil {
		p = prev.Obj
	}
	slimVersion(o.Obj, p)
	if accessor, err := meta.Accessor(o.Obj); err == nil {
		o.readKeys(accessor)
	}
}

// parseRV reads a resourceVersion kube-apiserver produced. nodeproxy
// relies on their being numbers, as every kube-apiserver backed by etcd
// makes them, to order changes and compare versions across lists.
func parseRV(s string) (uint64, error) {
	rv, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("resourceVersion %q is not a number", s)
	}
	return rv, nil
}

// byKey orders objects as etcd orders their keys: by namespace, then name.
// List order, limit and continue follow from it.
func byKey(a, b *Object) bool { return compareKeys(a, b) < 0 }

// compareKeys orders objects by namespace, then name.
func compareKeys(a, b *Object) int {
	if c := cmp.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// byNode orders pods by node first, so that a node's pods are one range.
func byNode(a, b *Object) bool {
	if a.NodeName != b.NodeName {
		return a.NodeName < b.NodeName
	}
	return byKey(a, b)
}
