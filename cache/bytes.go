package cache

import (
	"bytes"
	"fmt"
	"strconv"
	"unique"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/internal/kubeproto"
)

// Objects kept as bytes (docs/architecture.md, "Objects as
// kube-apiserver's bytes"): a store of a type marked bytes in served keeps
// each version as the protobuf kube-apiserver's serializer writes for it,
// beside the key fields, and drops the typed object once its handlers
// have seen it. A decoded pod of a Deployment costs several times its
// protobuf (docs/benchmarks.md, "The hub's heap per cached object"):
// most of a decoded object is Go's representation of it, not data.

// protobufOf is obj as kube-apiserver's protobuf serializer writes it:
// the magic, then a runtime.Unknown carrying apiVersion, kind and the
// object. The type meta goes on the envelope, not on obj, which readers
// may share.
func protobufOf(apiVersion, kind string, obj runtime.Object) ([]byte, error) {
	m, ok := obj.(interface{ Marshal() ([]byte, error) })
	if !ok {
		return nil, fmt.Errorf("%T has no protobuf encoding", obj)
	}
	raw, err := m.Marshal()
	if err != nil {
		return nil, fmt.Errorf("encode %s as protobuf: %w", kind, err)
	}
	unk := &runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: apiVersion, Kind: kind}, Raw: raw}
	var b bytes.Buffer
	b.Grow(unk.Size() + len(kubeproto.Magic))
	if err := protobufEnvelope.Encode(unk, &b); err != nil {
		return nil, fmt.Errorf("encode %s as protobuf: %w", kind, err)
	}
	return b.Bytes(), nil
}

// decodeProtobuf is the typed object raw (protobufOf's bytes) holds,
// without type meta, as the store keeps decoded objects, and the type
// meta from the envelope.
func decodeProtobuf(raw []byte) (runtime.Object, runtime.TypeMeta, error) {
	var tm runtime.TypeMeta
	typeMeta, body, err := kubeproto.Envelope(raw)
	if err != nil {
		return nil, tm, fmt.Errorf("protobuf of %d bytes: %w", len(raw), err)
	}
	if err := tm.Unmarshal(typeMeta.Value(raw)); err != nil {
		return nil, tm, fmt.Errorf("protobuf envelope's type: %w", err)
	}
	gvk := schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind)
	obj, err := scheme.Scheme.New(gvk)
	if err != nil {
		return nil, tm, fmt.Errorf("protobuf of %s: %w", gvk, err)
	}
	m, ok := obj.(interface{ Unmarshal([]byte) error })
	if !ok {
		return nil, tm, fmt.Errorf("%T has no protobuf decoding", obj)
	}
	// The generated Unmarshal copies every string and byte slice, so
	// the object shares nothing with the cache's bytes.
	if err := m.Unmarshal(body.Value(raw)); err != nil {
		return nil, tm, fmt.Errorf("protobuf of %s: %w", gvk, err)
	}
	objectDecodes.WithLabelValues(tm.Kind).Inc()
	return obj, tm, nil
}

// keepBytes makes o, a version not yet published whose handlers have
// seen it typed, keep its bytes (in segments cut as layout says) instead
// of its typed object, with what selectors read of it beside them (a
// Secret's type), and share what it holds unchanged of prev (the version
// it follows, or nil).
func (o *Object) keepBytes(apiVersion, kind string, layout cuts, prev *Object) error {
	whole, err := protobufOf(apiVersion, kind, o.obj)
	if err != nil {
		return err
	}
	raw := splitSegments(whole, layout)
	switch t := o.obj.(type) {
	case *corev1.Secret:
		if t.Type != "" {
			raw.selected = unique.Make(string(t.Type))
		}
	case *corev1.Node:
		if t.Spec.Unschedulable {
			raw.selected = unique.Make("true")
		}
	}
	o.raw, o.obj = raw, nil
	o.shareBytes(prev)
	if layout == metadataRest { // secrets and configmaps, not pods: see keysInBytes
		o.keysInBytes(whole)
	}
	return nil
}

// keysInBytes points o's namespace, name and UID at their bytes in o's
// first segment (whole, cut, begins with it), where they are equal: the
// index then allocates nothing of its own for them, about 70 bytes an
// object (a UID alone is 48). The segments are strings, so the keys are
// substrings of them. It runs after shareBytes, so that no version's
// keys keep another version's segment alive.
//
// A reader that keeps a key beyond the version (a node view's entry)
// keeps its first segment alive with it: for a secret or a configmap,
// whose metadata is small and whose writes are few, that costs less than
// the strings it spares; not so for a pod, whose metadata is several
// times larger and written at every status write, so pods' keys are
// their own strings, shared from version to version.
func (o *Object) keysInBytes(whole []byte) {
	_, raw, err := kubeproto.Envelope(whole)
	if err != nil || raw.Num == 0 {
		return
	}
	fs, err := kubeproto.Fields(raw.Value(whole))
	if err != nil || len(fs) == 0 || fs[0].Num != kubeproto.ObjectMetadata {
		return
	}
	metaAt := raw.Start + fs[0].Start
	metadata, err := kubeproto.Fields(fs[0].Value(raw.Value(whole)))
	if err != nil {
		return
	}
	first := o.raw.part[0]
	for _, f := range metadata {
		start, end := metaAt+f.Start, metaAt+f.End
		if end > len(first) || end == start {
			continue
		}
		var key *string
		switch f.Num {
		case kubeproto.MetaName:
			key = &o.Name
		case kubeproto.MetaNamespace:
			key = &o.Namespace
		case kubeproto.MetaUID:
			key = (*string)(&o.UID)
		default:
			continue
		}
		if in := first[start:end]; in == *key {
			*key = in
		}
	}
}

// shareBytes makes o, kept as bytes, take prev's segments and key fields
// where they are equal: a decoder allocates each string anew for every
// version. (Labels are interned.)
func (o *Object) shareBytes(prev *Object) {
	if prev == nil {
		return
	}
	o.raw.share(prev.raw)
	if o.Namespace == prev.Namespace {
		o.Namespace = prev.Namespace
	}
	if o.Name == prev.Name {
		o.Name = prev.Name
	}
	if o.NodeName == prev.NodeName {
		o.NodeName = prev.NodeName
	}
	if o.UID == prev.UID {
		o.UID = prev.UID
	}
}

// keptAsBytes are the types whose stores keep objects as bytes, each
// with where its versions' bytes are cut (segments): pods, the type that
// dominates a cluster's cache and whose versions a hub sends most, and
// secrets and configmaps, the objects every pod references, of which a
// decoded one costs about twice its bytes (docs/benchmarks.md, "The hub's
// heap per cached object"), and Nodes, whose kubelets' status writes
// fill the change log with versions that differ in a few conditions.
// Their only selectors beyond the index are a Secret's type and a Node's
// spec.unschedulable, kept beside the bytes (segments.selected).
var keptAsBytes = map[schema.GroupVersionResource]cuts{
	corev1.SchemeGroupVersion.WithResource("pods"):       metadataSpecStatus,
	corev1.SchemeGroupVersion.WithResource("secrets"):    metadataRest,
	corev1.SchemeGroupVersion.WithResource("configmaps"): metadataRest,
	corev1.SchemeGroupVersion.WithResource("nodes"):      nodeStatusWrites,
}

// keep makes o, about to be published after prev (or nil), hold as
// little as it can, and returns its typed object for the handlers (nil
// for an object taken in as it was listed: typedFor): kept
// as bytes in a store that keeps them (shareBytes), else decoded and
// sharing with prev (slimVersion). An object whose bytes cannot be made
// stays decoded: it costs memory, never correctness.
func (s *Store) keep(o, prev *Object) runtime.Object {
	if s.keepListed(o, prev) {
		return nil // taken in as listed: typedFor decodes it if need be
	}
	typed := o.obj
	if s.asBytes {
		err := o.keepBytes(s.apiVersion, s.Kind, s.layout, prev)
		if err == nil {
			return typed
		}
		klog.ErrorS(err, "Keeping an object decoded", "resource", s.Resource.Resource, "namespace", o.Namespace, "name", o.Name)
		bytesFallbacks.WithLabelValues(s.Resource.Resource, "encode").Inc()
	}
	o.slim(prev)
	return o.obj
}

// typedLocked is prev's typed object for the handlers (the graph
// compares a pod's node, UID, ephemeral containers and claims with its
// previous version, and removes a deleted one by name). Should its bytes
// not decode, the handlers get what the key fields say (shellOf): a
// change then looks bigger to the graph than it is, which costs it a
// rebuild of the pod's references, and a deletion still removes the
// pod, so nothing stays reachable for want of a decode.
//
// A store without handlers (configmaps, in the hub) decodes nothing: nil.
func (s *Store) typedLocked(prev *Object) runtime.Object {
	if len(s.handlers) == 0 {
		return nil
	}
	obj, err := prev.Typed()
	if err == nil {
		return obj
	}
	klog.ErrorS(err, "Giving the handlers the key fields of an object that does not decode", "resource", s.Resource.Resource,
		"namespace", prev.Namespace, "name", prev.Name)
	bytesFallbacks.WithLabelValues(s.Resource.Resource, "decode").Inc()
	return shellOf(s, prev)
}

// shellOf is an object of s's type with o's key fields and nothing else.
func shellOf(s *Store, o *Object) runtime.Object {
	obj, err := scheme.Scheme.New(s.Resource.GroupVersion().WithKind(s.Kind))
	if err != nil {
		return nil // every cached type is in client-go's scheme
	}
	if accessor, err := meta.Accessor(obj); err == nil {
		accessor.SetNamespace(o.Namespace)
		accessor.SetName(o.Name)
		accessor.SetUID(o.UID)
		accessor.SetLabels(o.Labels.Map())
		accessor.SetResourceVersion(strconv.FormatUint(o.RV, 10))
	}
	switch t := obj.(type) {
	case *corev1.Pod:
		t.Spec.NodeName = o.NodeName
	case *corev1.Secret:
		t.Type = corev1.SecretType(o.SecretType())
	}
	return obj
}

// SameSpec says whether o and other, versions of one object kept as
// bytes, hold the same spec (their second top-level field), known
// without decoding either: the store shares a segment between versions
// whose bytes are equal. False when it cannot tell (kept decoded, another
// shape), which a caller must take as "perhaps not". A node view reads a
// pod's references from its spec alone, so a kubelet's status write,
// which never changes the spec, needs no decode.
func (o *Object) SameSpec(other *Object) bool {
	return o != nil && other != nil && o.raw.sameSpec(other.raw)
}
