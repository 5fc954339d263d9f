package nodeview

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

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
	// ownNode: the node's own Node.
	ownNode
	// clusterWide: every object of the type (what the system:node role
	// lets every node read: services, runtime classes, CSI drivers).
	clusterWide
	// ownPods: the pods bound to the node.
	ownPods
)

// viewType is one cached type a view carries.
type viewType struct {
	gvr  schema.GroupVersionResource
	role role
	kind graph.Kind // reached and boundVolume only
}

// types are the types of a view, in the order a view takes in their
// changes and sends its initial state: what is referred to before what
// refers to it (secrets before the volume that names them, volumes before
// the claim they are bound to, all of them before the pods), so that
// within a step a pod's references are already where the pod looks for
// them. The position lists the types in the same order.
var types = []viewType{
	{gvr: corev1.SchemeGroupVersion.WithResource("secrets"), role: reached, kind: graph.Secret},
	{gvr: corev1.SchemeGroupVersion.WithResource("configmaps"), role: reached, kind: graph.ConfigMap},
	{gvr: corev1.SchemeGroupVersion.WithResource("serviceaccounts"), role: reached, kind: graph.ServiceAccount},
	{gvr: corev1.SchemeGroupVersion.WithResource("persistentvolumes"), role: boundVolume, kind: graph.PersistentVolume},
	{gvr: corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"), role: reached, kind: graph.PersistentVolumeClaim},
	{gvr: corev1.SchemeGroupVersion.WithResource("nodes"), role: ownNode},
	{gvr: corev1.SchemeGroupVersion.WithResource("services"), role: clusterWide},
	{gvr: nodev1.SchemeGroupVersion.WithResource("runtimeclasses"), role: clusterWide},
	{gvr: storagev1.SchemeGroupVersion.WithResource("csidrivers"), role: clusterWide},
	{gvr: corev1.SchemeGroupVersion.WithResource("pods"), role: ownPods},
}

// numTypes is len(types).
const numTypes = 10

// typeOfKind maps the graph's kinds to their index in types; -1 for the
// kinds a view does not carry (resource claims, attachments, slices:
// nodeproxy does not cache them for reading).
var typeOfKind = func() [16]int {
	var m [16]int
	for i := range m {
		m[i] = -1
	}
	for i, t := range types {
		if t.role == reached || t.role == boundVolume {
			m[t.kind] = i
		}
	}
	return m
}()

// Position is where a view is: for each of its types, the resourceVersion
// of that type's store up to which every change has been taken in. One
// number per type because the hub's stores are per type: each follows its
// own watch of kube-apiserver, and a quiet type's version moves only on
// bookmarks about a minute apart, so one number for all would have to
// wait for the slowest type (docs/api.md, "The node view").
type Position [numTypes]uint64

// String is the position as a client sends it back in resourceVersion:
// "secrets=12,configmaps=34,...", every type once, in types order.
func (p Position) String() string {
	var b strings.Builder
	for i, t := range types {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(t.gvr.Resource)
		b.WriteByte('=')
		b.WriteString(strconv.FormatUint(p[i], 10))
	}
	return b.String()
}

// covers reports whether p is at or past q for every type.
func (p Position) covers(q Position) bool {
	for i := range p {
		if p[i] < q[i] {
			return false
		}
	}
	return true
}

// ParsePosition reads a position String made. Every type must be there,
// once, in any order: a position that lacks one cannot say what the
// client holds of it.
func ParsePosition(s string) (Position, error) {
	var p Position
	var seen [numTypes]bool
	for part := range strings.SplitSeq(s, ",") {
		name, value, ok := strings.Cut(part, "=")
		if !ok {
			return p, fmt.Errorf("position %q: %q is not resource=resourceVersion", s, part)
		}
		i := typeIndex(name)
		if i < 0 {
			return p, fmt.Errorf("position %q: %q is not a type of the node view", s, name)
		}
		if seen[i] {
			return p, fmt.Errorf("position %q: %s twice", s, name)
		}
		rv, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			return p, fmt.Errorf("position %q: resourceVersion of %s: %w", s, name, err)
		}
		p[i], seen[i] = rv, true
	}
	for i, ok := range seen {
		if !ok {
			return p, fmt.Errorf("position %q lacks %s", s, types[i].gvr.Resource)
		}
	}
	return p, nil
}

func typeIndex(resource string) int {
	for i, t := range types {
		if t.gvr.Resource == resource {
			return i
		}
	}
	return -1
}
