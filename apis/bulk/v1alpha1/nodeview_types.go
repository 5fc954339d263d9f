package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// The node view: one bulk watch channel that carries everything one node
// may read (docs/api.md, "The node view"). A client opens it as any
// channel, with this selector:
//
//	{"resource":{"group":"bulk.k8s.io","version":"v1alpha1","resource":"nodeviews"},
//	 "options":{"fieldSelector":"metadata.name=<its own node>","resourceVersion":"<a position, or empty>"}}

// NodeViewResource is the selector's resource of a node view channel.
var NodeViewResource = metav1.GroupVersionResource{Group: GroupName, Version: "v1alpha1", Resource: "nodeviews"}

// NodeViewKind is the kind of a node view's BOOKMARK object, whose
// metadata.resourceVersion is the view's position: the resume point.
const NodeViewKind = "NodeView"

// Event types of a node view besides ADDED, MODIFIED, DELETED and
// BOOKMARK, for objects whose membership changed through other objects.
const (
	// NodeViewEntered: an existing object the node now reaches (a pod of
	// the node uses it, a PV bound to a claim of the node), with its state.
	NodeViewEntered watch.EventType = "ENTERED"
	// NodeViewLeft: an object the node no longer reaches. Its object is
	// the identity alone (apiVersion, kind, namespace, name): the node
	// may not read its state any more.
	NodeViewLeft watch.EventType = "LEFT"
)

// NodeViewProgressAnnotation is the annotation of a node view's BOOKMARK
// that answers a progress request: its value is the request's token.
const NodeViewProgressAnnotation = "bulk.k8s.io/progress"
