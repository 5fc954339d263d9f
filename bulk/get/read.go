package get

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/nodeproxy/nodeproxy/bulk"
	"github.com/nodeproxy/nodeproxy/cache"
)

// list is the answer to one operation: encoded items (shared with the
// Encoder's cache, never modified) and the list's metadata; or, for an
// uncached type, raw: kube-apiserver's whole list as it sent it.
type list struct {
	raw   []byte
	store *cache.Store
	rv    uint64
	cont  string
	items [][]byte
}

// run executes q; latest is its type's consistentVersion when q reads
// consistently.
func (g *Getter) run(ctx context.Context, q *bulk.Query, latest consistentVersion) (list, error) {
	var (
		snap   *cache.Snapshot
		listRV uint64
		err    error
	)
	if q.Consistent() {
		snap, err = g.catalog.ReadConsistent(ctx, q, latest.rv, latest.start)
		if snap != nil {
			listRV = snap.RV
		}
	} else {
		snap, listRV, err = snapshotFor(ctx, q)
	}
	if err != nil {
		return list{}, err
	}
	store, limit, reach, enc := q.Store(), q.Limit(), g.catalog.Reachability(), g.catalog.Encoder()
	var items [][]byte
	var last *cache.Object
	more := false
	var encodeErr error
	visit := func(o *cache.Object) bool {
		if !q.Matches(o, reach) {
			return true
		}
		if limit > 0 && int64(len(items)) == limit {
			more = true
			return false
		}
		b, err := enc.Encode(store, o)
		if err != nil {
			encodeErr = err
			return false
		}
		items = append(items, b)
		last = o
		return true
	}
	fromNs, fromName := q.Namespace(), ""
	if key, _ := q.Continue(); key != "" {
		fromNs, fromName = startFromContinue(store, key)
	}
	q.Ascend(snap, fromNs, fromName, visit)
	if encodeErr != nil {
		return list{}, apierrors.NewInternalError(encodeErr)
	}
	l := list{store: store, rv: listRV, items: items}
	if more {
		if l.cont, err = continueToken(store, last, listRV); err != nil {
			return list{}, apierrors.NewInternalError(err)
		}
	}
	return l, nil
}

// snapshotFor picks the state q reads, unless q reads consistently
// (resourceVersion "", Catalog.ReadConsistent), with kube-apiserver's
// meaning of resourceVersion for lists: "0", the cache's latest; N, any
// state at least as new as N (waiting briefly for the cache to reach
// it); N with resourceVersionMatch=Exact, the state at N; a continue
// token, the state its first page was read at. It returns the
// resourceVersion the list reports.
func snapshotFor(ctx context.Context, q *bulk.Query) (*cache.Snapshot, uint64, error) {
	store := q.Store()
	snap := store.Snapshot()
	want, _ := q.ResourceVersion()
	contKey, contRV := q.Continue()
	if contKey != "" {
		want = contRV
	}
	if want > snap.RV {
		var err error
		if snap, err = bulk.ReadAt(ctx, store, want); err != nil {
			return nil, 0, err
		}
	}
	if contKey == "" && !q.Exact() {
		return snap, snap.RV, nil
	}
	at, err := snap.At(want)
	if errors.Is(err, cache.ErrExpired) {
		what := "resourceVersion " + strconv.FormatUint(want, 10)
		if contKey != "" {
			what = "the continue token"
		}
		return nil, 0, apierrors.NewResourceExpired(fmt.Sprintf("%s: %s is older than nodeproxy's cache holds; list again without it", store.Resource.Resource, what))
	}
	if err != nil {
		return nil, 0, apierrors.NewInternalError(err)
	}
	return at, want, nil
}
