package bulk

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
)

// Reachability answers whether a node reaches an object through the
// authorization graph; *graph.Graph is one.
type Reachability interface {
	Reachable(node string, ref graph.ObjectRef) bool
}

// Catalog is what the bulk requests serve: the cached types of
// cache.Resources, the types kube-apiserver answers as the caller
// (Uncached, when enabled), and the authorizers that decide who may read
// them. A bulk get and a bulk watch channel both begin here: Parse or
// ParseWatch, then Authorize, then a read of Store.
type Catalog struct {
	cache  *cache.Cache
	graph  Reachability
	stores map[metav1.GroupVersionResource]*cache.Store
	// decisions are per type, looked up once: a request of 100
	// operations should not hash label values 200 times.
	decisions map[*cache.Store]*decisionSeries
	// nodes decides node identities against the graph; delegated asks
	// kube-apiserver (SubjectAccessReview, cached) about everyone else.
	nodes, delegated authorizer.Authorizer
	// uncached answers the types the cache does not hold; nil refuses
	// them (--bulk-uncached-types off).
	uncached Uncached
	// latest asks kube-apiserver which resourceVersion it has reached,
	// for consistent reads and for resumes ahead of the cache: one
	// checker for both, so that they share its questions. nil: nobody to
	// ask (consistent reads are refused, resumes wait for the cache).
	latest *LatestChecker
	// progress shows a quiet type's cache current for consistent reads;
	// nil: they wait for the cache alone.
	progress *ProgressChecker
}

// NewCatalog serves the types of cache.Resources from c. Node identities
// are decided by nodes (the graph's authorizer), other users by
// delegated.
func NewCatalog(c *cache.Cache, g Reachability, nodes, delegated authorizer.Authorizer) *Catalog {
	stores := map[metav1.GroupVersionResource]*cache.Store{}
	decisions := map[*cache.Store]*decisionSeries{}
	for _, gvr := range cache.Resources {
		s := c.Store(gvr)
		stores[metav1.GroupVersionResource{Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource}] = s
		decisions[s] = newDecisionSeries(gvr.Resource)
	}
	return &Catalog{cache: c, graph: g, stores: stores, decisions: decisions, nodes: nodes, delegated: delegated}
}

// ServeUncached has operations on types the cache does not hold answered
// by u (kube-apiserver, as the caller) instead of refused. Call it before
// serving.
func (c *Catalog) ServeUncached(u Uncached) { c.uncached = u }

// AskLatest has consistent reads (resourceVersion "") and resumes ahead
// of the cache ask v which resourceVersion kube-apiserver has reached.
// Call it before serving; without it, a consistent read is refused with
// 500 ServerTimeout, as kube-apiserver refuses one when it cannot reach etcd.
// When v is also a Progress (hub's is), consistent reads of a quiet type
// ask it whether the cache is current; otherwise they wait for the cache
// to reach kube-apiserver's version, which a quiet type's does only with
// its next bookmark.
func (c *Catalog) AskLatest(v LatestVersions) {
	c.latest, c.progress = nil, nil
	if v != nil {
		c.latest = NewLatestChecker(v)
	}
	if p, ok := v.(Progress); ok {
		c.progress = NewProgressChecker(p)
	}
}

// Latest asks kube-apiserver which resourceVersion it has reached; nil
// when nobody may be asked.
func (c *Catalog) Latest() *LatestChecker { return c.latest }

// Store is the cached type r; nil if nodeproxy does not cache it.
func (c *Catalog) Store(r metav1.GroupVersionResource) *cache.Store { return c.stores[r] }

// Stores are the cached types served, in the order of cache.Resources.
func (c *Catalog) Stores() []*cache.Store {
	out := make([]*cache.Store, 0, len(cache.Resources))
	for _, gvr := range cache.Resources {
		out = append(out, c.cache.Store(gvr))
	}
	return out
}

// Encoder is the cache's encoder: every object version in JSON once,
// whatever the number of readers.
func (c *Catalog) Encoder() *cache.Encoder { return c.cache.Encoder() }

// Reachability is the graph queries on ReachableFromField match against.
func (c *Catalog) Reachability() Reachability { return c.graph }

// Uncached answers the types the cache does not hold; nil when they are
// refused.
func (c *Catalog) Uncached() Uncached { return c.uncached }

// Parse validates every operation of spec and returns them as queries,
// or every problem found, each naming its operation (422), or an error:
// a 400 Bad Request (an apierrors.APIStatus) for field selectors
// kube-apiserver would refuse, in its words (fields.go), or the first
// failure to look a type up (not the caller's fault: a 500).
func (c *Catalog) Parse(spec *v1alpha1.BulkGetOperationSpec) ([]*Query, field.ErrorList, error) {
	return parse(spec, c.Store, c.uncached)
}

// ParseWatch validates the selector of a bulk watch channel, with the
// errors of Parse; a 400 carries kube-apiserver's words alone, as a
// channel is one watch.
func (c *Catalog) ParseWatch(sel *v1alpha1.GetOperation) (*Query, field.ErrorList, error) {
	return parseWatch(sel, c.Store, c.uncached)
}
