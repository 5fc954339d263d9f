package v1alpha1

import (
	"fmt"
	"strconv"
	"strings"
)

// NodeViewType is one type a node view carries.
//
// +k8s:deepcopy-gen=false
// +k8s:openapi-gen=false
type NodeViewType struct {
	Group, Version, Resource, Kind string
	// Namespaced is whether its objects live in a namespace.
	Namespaced bool
}

// NodeViewTypes are the types of a node view, in the order a view takes
// in their changes and sends its initial state: what is referred to
// before what refers to it (secrets before the volume that names them,
// volumes before the claim they are bound to, all of them before the
// pods). A position lists them in the same order.
var NodeViewTypes = [...]NodeViewType{
	{Version: "v1", Resource: "secrets", Kind: "Secret", Namespaced: true},
	{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true},
	{Version: "v1", Resource: "serviceaccounts", Kind: "ServiceAccount", Namespaced: true},
	{Version: "v1", Resource: "persistentvolumes", Kind: "PersistentVolume"},
	{Version: "v1", Resource: "persistentvolumeclaims", Kind: "PersistentVolumeClaim", Namespaced: true},
	{Version: "v1", Resource: "nodes", Kind: "Node"},
	{Group: "storage.k8s.io", Version: "v1", Resource: "csinodes", Kind: "CSINode"},
	{Version: "v1", Resource: "services", Kind: "Service", Namespaced: true},
	{Group: "node.k8s.io", Version: "v1", Resource: "runtimeclasses", Kind: "RuntimeClass"},
	{Group: "storage.k8s.io", Version: "v1", Resource: "csidrivers", Kind: "CSIDriver"},
	{Version: "v1", Resource: "pods", Kind: "Pod", Namespaced: true},
}

// NodeViewTypeSet is a set of indexes in NodeViewTypes: the types a view
// of one version of the nodeviews resource carries.
type NodeViewTypeSet uint32

// Has reports whether s holds type i.
func (s NodeViewTypeSet) Has(i int) bool { return s&(1<<i) != 0 }

// AllNodeViewTypes is every type of NodeViewTypes.
const AllNodeViewTypes NodeViewTypeSet = 1<<len(NodeViewTypes) - 1

// nodeViewVersions are the versions of the nodeviews resource and the
// types a view of each carries: a client asks for the version whose types
// it knows, and never gets another type (docs/api.md, "Versions of the
// view"). v1alpha1 lacks csinodes.
var nodeViewVersions = map[string]NodeViewTypeSet{
	"v1alpha1": AllNodeViewTypes &^ (1 << NodeViewTypeIndex("csinodes")),
	"v1alpha2": AllNodeViewTypes,
}

// NodeViewTypesOf is the set of types a view of version carries, false
// for a version that is not one of the nodeviews resource.
func NodeViewTypesOf(version string) (NodeViewTypeSet, bool) {
	s, ok := nodeViewVersions[version]
	return s, ok
}

// NodeViewTypeIndex is the index in NodeViewTypes of resource, -1 if a
// view does not carry it.
func NodeViewTypeIndex(resource string) int {
	for i, t := range NodeViewTypes {
		if t.Resource == resource {
			return i
		}
	}
	return -1
}

// NodeViewPosition is where a view is, per type (NodeViewTypes order), as
// two resourceVersions of that type: At, up to which every change has
// been taken in, and Since, the last change taken in (at or before At).
// No change of the type lies in (Since, At], so the view holds the state
// of the type at every version from Since to At. docs/api.md, "The node
// view", says why a position is per type and why it has two numbers.
//
// +k8s:deepcopy-gen=false
// +k8s:openapi-gen=false
type NodeViewPosition struct {
	Since, At [len(NodeViewTypes)]uint64
	// Types are the types the position names, those of the view's
	// version; 0 means all of them. The others' Since and At are
	// meaningless.
	Types NodeViewTypeSet
}

// types is p.Types, all of them for 0.
func (p NodeViewPosition) types() NodeViewTypeSet {
	if p.Types == 0 {
		return AllNodeViewTypes
	}
	return p.Types
}

// Names reports whether p names type i.
func (p NodeViewPosition) Names(i int) bool { return p.types().Has(i) }

// String is the position as a client sends it back in resourceVersion:
// "secrets=700-812,configmaps=790,...", every type it names once, in
// NodeViewTypes order, Since-At, or one number when they are equal.
func (p NodeViewPosition) String() string {
	var b strings.Builder
	types := p.types()
	for i, t := range NodeViewTypes {
		if !types.Has(i) {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(t.Resource)
		b.WriteByte('=')
		if p.Since[i] != p.At[i] {
			b.WriteString(strconv.FormatUint(p.Since[i], 10))
			b.WriteByte('-')
		}
		b.WriteString(strconv.FormatUint(p.At[i], 10))
	}
	return b.String()
}

// Reaches reports whether a view at p has taken in every change q has:
// for each type, p.At at or past q.Since.
func (p NodeViewPosition) Reaches(q NodeViewPosition) bool {
	for i := range p.At {
		if p.At[i] < q.Since[i] {
			return false
		}
	}
	return true
}

// ParseNodeViewPosition reads a position String made. It must name the
// types of a version of the view, each once, in any order: a position
// that lacks one cannot say what the client holds of it. Its Types are
// those it names.
func ParseNodeViewPosition(s string) (NodeViewPosition, error) {
	var p NodeViewPosition
	var seen [len(NodeViewTypes)]bool
	for part := range strings.SplitSeq(s, ",") {
		name, value, ok := strings.Cut(part, "=")
		if !ok {
			return p, fmt.Errorf("position %q: %q is not resource=resourceVersion", s, part)
		}
		i := NodeViewTypeIndex(name)
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
		if ok {
			p.Types |= 1 << i
		}
	}
	for _, version := range nodeViewVersions {
		if p.Types == version {
			return p, nil
		}
	}
	for i, ok := range seen {
		if !ok && nodeViewVersions["v1alpha1"].Has(i) {
			return p, fmt.Errorf("position %q lacks %s", s, NodeViewTypes[i].Resource)
		}
	}
	return p, fmt.Errorf("position %q names the types of no version of the node view", s)
}
