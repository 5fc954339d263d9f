package nodeview

import (
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/graph"
)

// role is how an object of a type belongs to a node's view.
type role uint8

const (
	// reached: a graph kind, in the view while the node reaches it
	// (secrets, configmaps, service accounts, claims).
	reached role = iota
	// boundVolume: a PersistentVolume, in the view while it is bound to
	// a claim the node reaches.
	boundVolume
	// ownNode: the node's own object, named after it: its Node, its
	// CSINode.
	ownNode
	// clusterWide: every object of the type (what the system:node role
	// lets every node read: runtime classes, CSI drivers).
	clusterWide
	// podNamespaces: the objects of the namespaces where the node has a
	// pod, and of default (services: the kubelet reads them only for
	// its pods' environment variables, docs/api.md "The node view").
	podNamespaces
	// ownPods: the pods bound to the node.
	ownPods
)

// viewType is one cached type a view carries.
type viewType struct {
	gvr  schema.GroupVersionResource
	role role
	kind graph.Kind // reached, boundVolume and podNamespaces only
}

// types are the types of a view, in the order a view takes in their
// changes and sends its initial state: what is referred to before what
// refers to it (secrets before the volume that names them, volumes before
// the claim they are bound to, all of them before the pods), so that
// within a step a pod's references are already where the pod looks for
// them. The position lists the types in the same order.
var types = [numTypes]viewType{
	{gvr: corev1.SchemeGroupVersion.WithResource("secrets"), role: reached, kind: graph.Secret},
	{gvr: corev1.SchemeGroupVersion.WithResource("configmaps"), role: reached, kind: graph.ConfigMap},
	{gvr: corev1.SchemeGroupVersion.WithResource("serviceaccounts"), role: reached, kind: graph.ServiceAccount},
	{gvr: corev1.SchemeGroupVersion.WithResource("persistentvolumes"), role: boundVolume, kind: graph.PersistentVolume},
	{gvr: corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"), role: reached, kind: graph.PersistentVolumeClaim},
	{gvr: corev1.SchemeGroupVersion.WithResource("nodes"), role: ownNode},
	{gvr: storagev1.SchemeGroupVersion.WithResource("csinodes"), role: ownNode},
	{gvr: corev1.SchemeGroupVersion.WithResource("services"), role: podNamespaces, kind: namespaceKind},
	{gvr: nodev1.SchemeGroupVersion.WithResource("runtimeclasses"), role: clusterWide},
	{gvr: storagev1.SchemeGroupVersion.WithResource("csidrivers"), role: clusterWide},
	{gvr: corev1.SchemeGroupVersion.WithResource("pods"), role: ownPods},
}

// numTypes is len(types), the protocol's number of types.
const numTypes = len(v1alpha1.NodeViewTypes)

// namespaceKind is no kind of the graph's: a view's path to a namespace
// (graph.ObjectRef{Kind: namespaceKind, Name: ns}) counts the node's pods
// in it, as a path to a secret counts the pods that use it, so that the
// namespace's services enter the view with its first pod and leave it
// after its last, by the same counts, index and events as what the graph
// decides (addPath). Above the graph's kinds, which it must never meet:
// it stays inside nodeview.
const namespaceKind graph.Kind = 15

// typeOfKind maps the graph's kinds to their index in types, and
// namespaceKind to the services'; -1 for the kinds a view does not carry
// (resource claims, attachments, slices: nodeproxy does not cache them
// for reading).
var typeOfKind = func() [namespaceKind + 1]int {
	var m [namespaceKind + 1]int
	for i := range m {
		m[i] = -1
	}
	for i, t := range types {
		if t.role == reached || t.role == boundVolume || t.role == podNamespaces {
			m[t.kind] = i
		}
	}
	return m
}()

// Position is where a view is, per type: the protocol's position
// (apis/bulk/v1alpha1), whose types are types in the same order.
type Position = v1alpha1.NodeViewPosition

// ParsePosition reads a position Position.String made.
func ParsePosition(s string) (Position, error) { return v1alpha1.ParseNodeViewPosition(s) }

func typeIndex(resource string) int { return v1alpha1.NodeViewTypeIndex(resource) }

// covers reports whether p has taken in every store up to the versions
// at: the stores' versions when a progress request came.
func covers(p Position, at [numTypes]uint64) bool {
	for i := range p.At {
		if p.At[i] < at[i] {
			return false
		}
	}
	return true
}
