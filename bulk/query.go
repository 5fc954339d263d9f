package bulk

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
	"github.com/nodeproxy/nodeproxy/passthrough"
)

// Query is one validated operation, ready to run: an operation of a bulk
// get, or the selector of a bulk watch channel. Only Catalog.Parse and
// Catalog.ParseWatch make one; its fields are read through the methods
// below and never change once it is authorized.
type Query struct {
	index     int
	store     *cache.Store
	kind      graph.Kind // for ReachableFromField
	namespace string

	// Taken from equality requirements, to pick an index: name
	// (metadata.name=), node (spec.nodeName= on pods), reachableFrom.
	name, node, reachableFrom string

	// fields are the requirements every object must meet, without
	// ReachableFromField; labels likewise.
	fields        fields.Requirements
	labels        labels.Selector
	fieldSelector fields.Selector // as given
	// fieldRequirements are fieldSelector's, for authorization.
	fieldRequirements fields.Requirements
	// refusal is kube-apiserver's refusal of the first field it would
	// not know (fields.go): the operation is a 400, not a 422.
	refusal string
	attrs   authorizer.AttributesRecord

	rv    uint64 // 0: any
	rvSet bool
	exact bool
	// consistent: resourceVersion "" where kube-apiserver makes it a
	// consistent read (a list; a channel with sendInitialEvents).
	consistent bool
	// watch marks a bulk watch channel's selector; bookmarks and
	// initialEvents are its options (initialEvents nil: not said).
	watch         bool
	bookmarks     bool
	initialEvents *bool
	limit         int64
	contKey       string // continue: the key to start at
	contRV        uint64
	resource      metav1.GroupVersionResource

	// uncached is set, and store nil, for a type nodeproxy does not cache:
	// kube-apiserver answers it as the caller (uncached.go here;
	// bulk/get/uncached.go, bulk/watch/uncached.go). options are
	// the operation's, sent as they are; lookupErr is a discovery failure.
	uncached  *passthrough.Type
	options   metav1.ListOptions
	lookupErr error
}

// Store is the cached type q reads; nil for an uncached type.
func (q *Query) Store() *cache.Store { return q.store }

// Kind is the graph's kind of q's type; 0 for a type the graph does not
// hold.
func (q *Query) Kind() graph.Kind { return q.kind }

// Namespace is the namespace q reads; "" for every namespace or a
// cluster-scoped type.
func (q *Query) Namespace() string { return q.namespace }

// Name is the object named by metadata.name=, if any.
func (q *Query) Name() string { return q.name }

// Node is the node named by spec.nodeName= on pods, if any.
func (q *Query) Node() string { return q.node }

// ResourceVersion is the operation's resourceVersion, and whether one
// was given (other than "0").
func (q *Query) ResourceVersion() (rv uint64, set bool) { return q.rv, q.rvSet }

// Consistent reports a read that must be no older than kube-apiserver's
// state when it arrived (resourceVersion "" on a list, or on a channel
// with sendInitialEvents): Catalog.ConsistentVersion, then
// Catalog.ReadConsistent.
func (q *Query) Consistent() bool { return q.consistent }

// Exact reports resourceVersionMatch=Exact: the state at
// ResourceVersion, not any state at least as new.
func (q *Query) Exact() bool { return q.exact }

// Continue is the decoded continue token: the key to start at and the
// resourceVersion of the state being paged; key "" when not continuing.
func (q *Query) Continue() (key string, rv uint64) { return q.contKey, q.contRV }

// Limit is the page size of a bulk get operation; 0 for no limit.
func (q *Query) Limit() int64 { return q.limit }

// Bookmarks reports allowWatchBookmarks on a watch channel.
func (q *Query) Bookmarks() bool { return q.bookmarks }

// InitialEvents is a watch channel's sendInitialEvents; nil when not
// said.
func (q *Query) InitialEvents() *bool { return q.initialEvents }

// Uncached is the type kube-apiserver answers q on, for a type nodeproxy
// does not cache; nil for a cached type.
func (q *Query) Uncached() *passthrough.Type { return q.uncached }

// Options are the operation's list options as the caller sent them, for
// an uncached type.
func (q *Query) Options() metav1.ListOptions { return q.options }

// Path is where q's errors and refusals point: its operation in a bulk
// get, the selector of a watch channel. Built only for errors: a request
// of 1000 valid operations should not allocate 1000 paths.
func (q *Query) Path() *field.Path {
	if q.watch {
		return selectorPath
	}
	return operationsPath.Index(q.index)
}

// Selection is what a watch channel's query selects, as a comparable
// value: two queries of one type with equal Selections match the same
// objects, so a dispatcher evaluates them once per change. Selectors
// written differently (terms in another order) are not recognised as
// equal; they are merely evaluated apart.
type Selection struct{ namespace, fields, labels string }

// Selection is q's; see the type.
func (q *Query) Selection() Selection {
	s := Selection{namespace: q.namespace}
	if q.fieldSelector != nil {
		s.fields = q.fieldSelector.String()
	}
	if q.labels != nil {
		s.labels = q.labels.String()
	}
	return s
}

// GraphDecided reports whether a node's access to q's type is decided by
// the graph (the objects its pods reference, its pods, its Node): the
// node authorizer's "no" is then final, and a lost edge ends the node's
// channel at once. The cluster-wide types are not: a node's access to
// them is the system:node role's, then RBAC's, and changes without the
// graph hearing of it.
func (q *Query) GraphDecided() bool {
	return q.kind != 0 || q.store != nil && q.store.Resource.Resource == "nodes"
}

// NamesOneObject reports whether q selects one object by name, in a
// namespace or of a cluster-scoped type: a lookup rather than a scan, a
// "get" to the node authorizer, and an object whose access can be lost.
func (q *Query) NamesOneObject() bool {
	return q.store != nil && q.name != "" && (q.namespace != "" || !q.store.Namespaced)
}
