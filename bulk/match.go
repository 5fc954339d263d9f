package bulk

import (
	"k8s.io/apimachinery/pkg/selection"

	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
)

// Matches evaluates every requirement of q on o, its namespace included.
func (q *Query) Matches(o *cache.Object, g Reachability) bool {
	if q.namespace != "" && o.Namespace != q.namespace {
		return false
	}
	for _, r := range q.fields {
		v, ok := fieldValue(o, r.Field)
		if !ok || (r.Operator == selection.NotEquals) == (v == r.Value) {
			return false
		}
	}
	// The cache's Labels are read in place, without a map.
	if q.labels != nil && !q.labels.Empty() && !q.labels.Matches(o.Labels) {
		return false
	}
	if q.reachableFrom != "" {
		switch {
		case q.store.Resource.Resource == "nodes":
			return o.Name == q.reachableFrom
		case q.kind == graph.Pod:
			return o.NodeName == q.reachableFrom
		default:
			return g.Reachable(q.reachableFrom, graph.ObjectRef{Kind: q.kind, Namespace: o.Namespace, Name: o.Name})
		}
	}
	return true
}

// Ascend visits the objects of snap that q may select, from key
// (fromNamespace, fromName), using the narrowest index: one lookup for a
// named object (on a first page), the node index for pods of one node,
// else a range over the namespace.
func (q *Query) Ascend(snap *cache.Snapshot, fromNamespace, fromName string, visit func(*cache.Object) bool) {
	node := q.node
	if node == "" {
		node = q.reachableFrom
	}
	switch {
	case q.NamesOneObject() && q.contKey == "":
		if o, ok := snap.Get(q.namespace, q.name); ok {
			visit(o)
		}
	case snap.Indexed() && node != "":
		snap.AscendNode(node, q.namespace, fromNamespace, fromName, visit)
	default:
		snap.Ascend(q.namespace, fromNamespace, fromName, visit)
	}
}
