package bulk

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/storage"

	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
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

// run executes q.
func (g *Getter) run(ctx context.Context, q *query) (list, error) {
	snap, listRV, err := g.snapshotFor(ctx, q)
	if err != nil {
		return list{}, err
	}
	var items [][]byte
	var last *cache.Object
	more := false
	var encodeErr error
	visit := func(o *cache.Object) bool {
		if !q.matches(o, g.graph) {
			return true
		}
		if q.limit > 0 && int64(len(items)) == q.limit {
			more = true
			return false
		}
		b, err := g.cache.Encoder().Encode(q.store, o)
		if err != nil {
			encodeErr = err
			return false
		}
		items = append(items, b)
		last = o
		return true
	}
	fromNs, fromName := q.namespace, ""
	if q.contKey != "" {
		fromNs, fromName = q.startFromContinue()
	}
	q.ascend(snap, fromNs, fromName, visit)
	if encodeErr != nil {
		return list{}, apierrors.NewInternalError(encodeErr)
	}
	l := list{store: q.store, rv: listRV, items: items}
	if more {
		if l.cont, err = continueToken(q.store, last, listRV); err != nil {
			return list{}, apierrors.NewInternalError(err)
		}
	}
	return l, nil
}

// snapshotFor picks the state q reads, with kube-apiserver's meaning of
// resourceVersion for lists: unset or "0", the cache's latest; N, any
// state at least as new as N (waiting briefly for the cache to reach
// it); N with resourceVersionMatch=Exact, the state at N; a continue
// token, the state its first page was read at. It returns the
// resourceVersion the list reports.
func (g *Getter) snapshotFor(ctx context.Context, q *query) (*cache.Snapshot, uint64, error) {
	snap := q.store.Snapshot()
	want := q.rv
	if q.contKey != "" {
		want = q.contRV
	}
	if want > snap.RV {
		var err error
		if snap, err = readAt(ctx, q.store, want); err != nil {
			return nil, 0, err
		}
	}
	if q.contKey == "" && !q.exact {
		return snap, snap.RV, nil
	}
	at, err := snap.At(want)
	if errors.Is(err, cache.ErrExpired) {
		what := "resourceVersion " + strconv.FormatUint(want, 10)
		if q.contKey != "" {
			what = "the continue token"
		}
		return nil, 0, apierrors.NewResourceExpired(fmt.Sprintf("%s: %s is older than nodeproxy's cache holds; list again without it", q.store.Resource.Resource, what))
	}
	if err != nil {
		return nil, 0, apierrors.NewInternalError(err)
	}
	return at, want, nil
}

// matches evaluates every requirement of q on o, its namespace included.
func (q *query) matches(o *cache.Object, g Reachability) bool {
	if q.namespace != "" && o.Namespace != q.namespace {
		return false
	}
	for _, r := range q.fields {
		var v string
		switch r.Field {
		case fieldName:
			v = o.Name
		case fieldNamespace:
			v = o.Namespace
		case fieldNodeName:
			v = o.NodeName
		}
		if (r.Operator == selection.NotEquals) == (v == r.Value) {
			return false
		}
	}
	// labels.Set is a conversion of the map, not a copy.
	if q.labels != nil && !q.labels.Empty() && !q.labels.Matches(labels.Set(o.Labels)) {
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

// Continue tokens are kube-apiserver's (k8s.io/apiserver/pkg/storage):
// the key to start at, "/<namespace>/<name>\x00" (just after the last
// item returned), and the resourceVersion of the state being paged.
func continueToken(s *cache.Store, last *cache.Object, rv uint64) (string, error) {
	key := "/" + last.Name + "\x00"
	if s.Namespaced {
		key = "/" + last.Namespace + "/" + last.Name + "\x00"
	}
	return storage.EncodeContinue(key, "/", int64(rv))
}

func (q *query) startFromContinue() (namespace, name string) {
	key := strings.TrimPrefix(q.contKey, "/")
	if !q.store.Namespaced {
		return "", key
	}
	namespace, name, _ = strings.Cut(key, "/")
	return namespace, name
}
