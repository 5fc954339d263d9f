package get

import (
	"context"
	"sync"

	"github.com/nodeproxy/nodeproxy/bulk"
)

// maxUncachedInFlight bounds the lists one bulk get has in flight on
// kube-apiserver at once. Each is a round trip of a millisecond or more
// (kube-apiserver's own work, more through an aggregated server), so a
// request naming several uncached types waits for the slowest rather
// than their sum; 8 keeps one request from taking more than a few of
// kube-apiserver's priority-and-fairness seats for its user.
const maxUncachedInFlight = 8

// listUncached runs the uncached operations of queries, at most
// maxUncachedInFlight at once, into lists, and returns the error of the
// first operation (in request order) that failed: kube-apiserver's own
// Status, naming the operation.
func (g *Getter) listUncached(ctx context.Context, queries []*bulk.Query, lists []list) error {
	errs := make([]error, len(queries))
	sem := make(chan struct{}, maxUncachedInFlight)
	var wg sync.WaitGroup
	for i, q := range queries {
		t := q.Uncached()
		if t == nil {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			opts := q.Options()
			raw, err := g.catalog.Uncached().List(ctx, *t, q.Namespace(), &opts)
			if err != nil {
				errs[i] = at(q, err)
				return
			}
			lists[i] = list{raw: raw}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
