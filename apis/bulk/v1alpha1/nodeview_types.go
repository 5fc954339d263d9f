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

// NodeViewResource is the selector's resource of a node view channel, at
// its first version; NodeViewTypesOf says what each version carries.
var NodeViewResource = metav1.GroupVersionResource{Group: GroupName, Version: "v1alpha1", Resource: "nodeviews"}

// NodeViewResourceV1alpha2 is the node view whose types include the
// node's CSINode.
var NodeViewResourceV1alpha2 = metav1.GroupVersionResource{Group: GroupName, Version: "v1alpha2", Resource: "nodeviews"}

// NodeViewKind is the kind of a node view's BOOKMARK object, whose
// metadata.resourceVersion is the view's position: the resume point.
const NodeViewKind = "NodeView"

// NodeViewProgressAnnotation marks a node view's BOOKMARK that answers a
// progress request (ProgressRequest): its value is the request's token.
// The bookmark's position is at or past everything the hub's cache held
// when the request came, and the events before it are the change of the
// view up to that position, as at any bookmark. When several requests of
// a channel are pending, one bookmark answers them all, annotated with
// the latest token: requests are answered in the order they came, so the
// answer to a token answers every request the channel got before it.
const NodeViewProgressAnnotation = "bulk.k8s.io/progress"

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
