package get

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/component-base/metrics"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/bulk"
	"github.com/nodeproxy/nodeproxy/cache"
)

// Getter answers bulk gets from the cache: every operation of a request
// parsed and authorized by the catalog, then read.
type Getter struct {
	catalog *bulk.Catalog
	// operations are per type, looked up once: a request of 100
	// operations should not hash label values 100 times.
	operations map[*cache.Store]metrics.CounterMetric
}

// NewGetter answers bulk gets on the types of c.
func NewGetter(c *bulk.Catalog) *Getter {
	RegisterMetrics() // before WithLabelValues, which is a no-op until then
	g := &Getter{catalog: c, operations: map[*cache.Store]metrics.CounterMetric{}}
	for _, s := range c.Stores() {
		g.operations[s] = operations.WithLabelValues(s.Resource.Resource)
	}
	return g
}

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
	queries, errs, err := g.catalog.Parse(spec)
	if _, refused := err.(apierrors.APIStatus); refused {
		observeRequest(outcomeInvalid)
		return nil, err
	}
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
		if q.Uncached() != nil {
			continue
		}
		if err := g.catalog.Authorize(ctx, u, q); err != nil {
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
	latest, err := g.consistentVersions(ctx, queries)
	if err != nil {
		observeRequest(outcomeError)
		return nil, err
	}
	for i, q := range queries {
		if q.Uncached() == nil {
			l, err := g.run(ctx, q, latest[q.Store()])
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
		if s := q.Store(); s != nil {
			g.operations[s].Inc()
		}
	}
	return a, nil
}

// consistentVersions asks kube-apiserver's current resourceVersion once
// per type that operations read consistently (resourceVersion ""): they
// all arrived together, so one answer serves them all, and a request of
// a hundred named operations costs one question, not a hundred in a row.
func (g *Getter) consistentVersions(ctx context.Context, queries []*bulk.Query) (map[*cache.Store]consistentVersion, error) {
	var out map[*cache.Store]consistentVersion
	for _, q := range queries {
		s := q.Store()
		if s == nil || !q.Consistent() {
			continue
		}
		if _, done := out[s]; done {
			continue
		}
		start := time.Now()
		rv, err := g.catalog.ConsistentVersion(ctx, s, "list", start)
		if err != nil {
			return nil, at(q, err)
		}
		if out == nil {
			out = map[*cache.Store]consistentVersion{}
		}
		out[s] = consistentVersion{rv: rv, start: start}
	}
	return out, nil
}

// consistentVersion is kube-apiserver's resourceVersion for a type's
// consistent reads, and when the request began asking for it.
type consistentVersion struct {
	rv    uint64
	start time.Time
}

// at prefixes an API error's message with the operation it is about.
func at(q *bulk.Query, err error) error {
	if status, ok := err.(apierrors.APIStatus); ok {
		s := status.Status()
		s.Message = fmt.Sprintf("%s: %s", q.Path(), s.Message)
		return &apierrors.StatusError{ErrStatus: s}
	}
	return apierrors.NewInternalError(fmt.Errorf("%s: %w", q.Path(), err))
}
