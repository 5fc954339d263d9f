package cache

import (
	"cmp"
	"fmt"
	"strconv"
	"unique"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Object is one version of one cached object. It is immutable once a
// store has published it: readers on any goroutine may hold it for as long
// as they like, and the next version is a new Object.
//
// An object is kept either decoded (typed) or as the protobuf
// kube-apiserver's serializer writes for it (keptAsBytes: pods, secrets,
// configmaps, nodes), with the key fields beside it so that lookups, indexes and
// selectors never decode (docs/architecture.md, "Objects as
// kube-apiserver's bytes"). Readers that need the typed object call Typed. For a decoded object the key fields
// repeat its own metadata only as string headers (the bytes are shared),
// so the indexes cost a pointer per object, not a copy of it.
type Object struct {
	Namespace string
	Name      string
	// NodeName is spec.nodeName of a pod; empty for every other type.
	NodeName string
	// UID tells a name deleted and created again from the object it was.
	UID types.UID
	// Deleting is metadata.deletionTimestamp, nil until the object is
	// being deleted: the hub's local token check reads it of the objects
	// a token is bound to, without decoding them.
	Deleting *metav1.Time
	// RV is metadata.resourceVersion as a number: kube-apiserver's
	// resourceVersions are etcd revisions, so they order all changes.
	RV     uint64
	Labels Labels

	// obj is the typed object as kube-apiserver sent it, without
	// metadata.managedFields and without apiVersion/kind; nil once the
	// store has kept the object as raw.
	obj runtime.Object
	// raw is the object as kube-apiserver's protobuf serializer writes
	// it ("k8s\x00", then a runtime.Unknown with apiVersion, kind and the
	// object), without managedFields, in segments; empty for an object
	// kept decoded.
	raw *segments
}

// newObject takes ownership of obj: it strips managedFields and the type
// meta (so that encoding can prefix its own, see encode.go) and reads the
// key fields. The object is kept decoded until the store calls keepBytes.
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
	o := &Object{RV: rv, obj: ro}
	o.readKeys(accessor)
	return o, nil
}

// NewObject is obj as a store keeps an object decoded: what a store's
// writer makes of what its reflector decoded, for readers fed by hand
// (tests and benchmarks of the bulk handlers). It takes ownership of obj.
func NewObject(obj runtime.Object) (*Object, error) { return newObject(obj) }

// Typed is the typed object: the one kept, or a new one decoded from the
// bytes kept, which the caller then owns. Either way callers must not
// modify it: a kept one is shared with every reader.
func (o *Object) Typed() (runtime.Object, error) {
	if o.obj != nil {
		return o.obj, nil
	}
	obj, _, err := decodeProtobuf(o.raw.join())
	if err != nil {
		return nil, fmt.Errorf("decode %s/%s: %w", o.Namespace, o.Name, err)
	}
	return obj, nil
}

// SecretType is a Secret's type ("" for every other type), read from the
// index beside the bytes or from the object kept decoded: never decoded
// for the caller, so a selector on it costs a scan nothing more.
func (o *Object) SecretType() string {
	if !o.raw.empty() {
		if o.raw.selected == (unique.Handle[string]{}) {
			return ""
		}
		return o.raw.selected.Value()
	}
	if secret, ok := o.obj.(*corev1.Secret); ok {
		return string(secret.Type)
	}
	return ""
}

// Unschedulable is a Node's spec.unschedulable (false for every other
// type), read as SecretType is: never decoded for the caller.
func (o *Object) Unschedulable() bool {
	if !o.raw.empty() {
		return o.raw.selected == unique.Make("true")
	}
	if node, ok := o.obj.(*corev1.Node); ok {
		return node.Spec.Unschedulable
	}
	return false
}

// readKeys points the key fields at the object's own metadata.
func (o *Object) readKeys(accessor metav1.Object) {
	o.Namespace, o.Name, o.Labels, o.UID = accessor.GetNamespace(), accessor.GetName(), internLabels(accessor.GetLabels()), accessor.GetUID()
	o.Deleting = accessor.GetDeletionTimestamp()
	if pod, ok := o.obj.(*corev1.Pod); ok {
		o.NodeName = pod.Spec.NodeName
	}
}

// slim makes o, a version not yet published and kept decoded, hold as
// little as it can: what it holds unchanged of prev (the version it
// follows, or nil) is prev's, key fields included, and its lists are cut
// to length (slimVersion).
func (o *Object) slim(prev *Object) {
	var p any
	if prev != nil && prev.obj != nil {
		p = prev.obj
	}
	slimVersion(o.obj, p)
	if accessor, err := meta.Accessor(o.obj); err == nil {
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
