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

// Position is where a view is, per type, as two resourceVersions of
// that type's store: At, up to which every change has been taken in, and
// Since, the last change taken in (at or before At; At itself when no
// change has been taken in since the views started). No change of the
// type lies in (Since, At], so the view holds the state of the type at
// every version from Since to At.
//
// One pair per type because the hub's stores are per type: each follows
// its own watch of kube-apiserver, and a quiet type's version moves only
// on bookmarks about a minute apart, so one number for all would have to
// wait for the slowest type (docs/api.md, "The node view"). Since is what
// lets another replica resume the view without waiting for its own
// bookmark of a quiet type: At may come from the serving replica's
// bookmark, which no other replica has had, while Since is a change every
// replica's watch delivers within milliseconds.
type Position struct {
	Since, At [numTypes]uint64
}

// String is the position as a client sends it back in resourceVersion:
// "secrets=700-812,configmaps=790,...", every type once, in types order,
// Since-At, or one number when they are equal.
func (p Position) String() string {
	var b strings.Builder
	for i, t := range types {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(t.gvr.Resource)
		b.WriteByte('=')
		if p.Since[i] != p.At[i] {
			b.WriteString(strconv.FormatUint(p.Since[i], 10))
			b.WriteByte('-')
		}
		b.WriteString(strconv.FormatUint(p.At[i], 10))
	}
	return b.String()
}

// reaches reports whether a store at p has taken in every change q has:
// for each type, p.At at or past q.Since.
func (p Position) reaches(q Position) bool {
	for i := range p.At {
		if p.At[i] < q.Since[i] {
			return false
		}
	}
	return true
}

// covers reports whether p has taken in every store up to the versions
// at: the stores' versions when a progress request came.
func (p Position) covers(at [numTypes]uint64) bool {
	for i := range p.At {
		if p.At[i] < at[i] {
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
		since, at, ranged := strings.Cut(value, "-")
		if !ranged {
			at = value
		}
		var err error
		if p.At[i], err = strconv.ParseUint(at, 10, 64); err != nil {
			return p, fmt.Errorf("position %q: resourceVersion of %s: %w", s, name, err)
		}
		p.Since[i] = p.At[i]
		if ranged {
			if p.Since[i], err = strconv.ParseUint(since, 10, 64); err != nil {
				return p, fmt.Errorf("position %q: last change of %s: %w", s, name, err)
			}
			if p.Since[i] > p.At[i] {
				return p, fmt.Errorf("position %q: the last change of %s is after its resourceVersion", s, name)
			}
		}
		seen[i] = true
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
