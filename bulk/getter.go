package bulk

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
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

// Getter answers bulk gets from the cache.
type Getter struct {
	cache  *cache.Cache
	graph  Reachability
	stores map[metav1.GroupVersionResource]*cache.Store
	series map[*cache.Store]*typeSeries
	// nodes decides node identities against the graph; delegated asks
	// kube-apiserver (SubjectAccessReview, cached) about everyone else.
	nodes, delegated authorizer.Authorizer
	// uncached answers the types the cache does not hold; nil refuses
	// them (--bulk-uncached-types off).
	uncached Uncached
}

// NewGetter serves the types of cache.Resources from c. Node identities
// are decided by nodes (the graph's authorizer), other users by
// delegated.
func NewGetter(c *cache.Cache, g Reachability, nodes, delegated authorizer.Authorizer) *Getter {
	stores := map[metav1.GroupVersionResource]*cache.Store{}
	series := map[*cache.Store]*typeSeries{}
	for _, gvr := range cache.Resources {
		s := c.Store(gvr)
		stores[metav1.GroupVersionResource{Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource}] = s
		series[s] = newTypeSeries(gvr.Resource)
	}
	return &Getter{cache: c, graph: g, stores: stores, series: series, nodes: nodes, delegated: delegated}
}

// ServeUncached has operations on types the cache does not hold answered
// by u (kube-apiserver, as the caller) instead of refused. Call it before
// serving.
func (g *Getter) ServeUncached(u Uncached) { g.uncached = u }

// Get validates every operation, authorizes every one, then answers them
// all, or returns the first error: nothing partial is ever returned. The
// results are built in memory, a copy of every item; the REST handler
// streams an Answer instead.
func (g *Getter) Get(ctx context.Context, u user.Info, spec *v1alpha1.BulkGetOperationSpec) ([]runtime.RawExtension, error) {
	a, err := g.Answer(ctx, u, spec, 0)
	if err != nil {
		return nil, err
	}
	return a.Results(), nil
}

// Answer validates every operation, authorizes every one, then looks
// every one up, or returns the first error. The Answer refers to the
// cache's encoded objects: nothing of the answer is built yet. An answer
// larger than maxBytes (unless 0) is refused with 413, before anything of
// it is built or written.
func (g *Getter) Answer(ctx context.Context, u user.Info, spec *v1alpha1.BulkGetOperationSpec, maxBytes int64) (*Answer, error) {
	queries, errs, err := parse(spec, func(r metav1.GroupVersionResource) *cache.Store { return g.stores[r] }, g.uncached)
	if err != nil {
		observeRequest(outcomeError)
		return nil, apierrors.NewInternalError(fmt.Errorf("look up the operations' resource types: %w", err))
	}
	if len(errs) > 0 {
		observeRequest(outcomeInvalid)
		return nil, apierrors.NewInvalid(v1alpha1.SchemeGroupVersion.WithKind("BulkGetOperation").GroupKind(), "", errs)
	}
	// Cached operations are decided here, cheaply, before any uncached
	// one costs kube-apiserver a list; an uncached one is decided by
	// kube-apiserver when it is listed, as the caller.
	for _, q := range queries {
		if q.uncached != nil {
			continue
		}
		if err := g.authorize(ctx, u, q); err != nil {
			observeRequest(outcomeForbidden)
			return nil, err
		}
	}
	a := &Answer{lists: make([]list, len(queries))}
	if err := g.listUncached(ctx, queries, a.lists); err != nil {
		if apierrors.IsForbidden(err) {
			observeRequest(outcomeForbidden)
		} else {
			observeRequest(outcomeError)
		}
		return nil, err
	}
	for i, q := range queries {
		if q.uncached == nil {
			l, err := g.run(ctx, q)
			if err != nil {
				observeRequest(outcomeError)
				return nil, at(q, err)
			}
			a.lists[i] = l
		}
		a.size += a.lists[i].size()
	}
	if maxBytes > 0 && int64(a.size) > maxBytes {
		observeRequest(outcomeTooLarge)
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf(
			"the answer of this bulk get would be %d bytes, more than the %d allowed (--bulk-get-max-answer-bytes): split its operations over several requests, or page lists with limit",
			a.size, maxBytes))
	}
	observeRequest(outcomeOK)
	for _, q := range queries {
		if q.store != nil {
			g.series[q.store].operations.Inc()
		}
	}
	return a, nil
}

// at prefixes an API error's message with the operation it is about.
func at(q *query, err error) error {
	if status, ok := err.(apierrors.APIStatus); ok {
		s := status.Status()
		s.Message = fmt.Sprintf("%s: %s", q.path(), s.Message)
		return &apierrors.StatusError{ErrStatus: s}
	}
	return apierrors.NewInternalError(fmt.Errorf("%s: %w", q.path(), err))
}
