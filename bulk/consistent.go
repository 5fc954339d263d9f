package bulk

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
)

// SelectedVersions is what a consistent read asks kube-apiserver when the
// cache has not reached kube-apiserver's resourceVersion of the type: the
// objects the operation selects, as a consistent read of kube-apiserver
// lists them (metadata only). The type's version moves with every write
// to any type (it is etcd's revision), so the cache of a quiet type trails
// it until the next bookmark, up to a minute, without lacking anything;
// comparing what the operation selects tells the two apart. A
// LatestVersions may implement it; hub's does.
type SelectedVersions interface {
	// SelectedVersions lists resource in namespace ("" for all) with the
	// selectors as kube-apiserver parses them, as a consistent read, and
	// returns the list's resourceVersion and each object's.
	SelectedVersions(ctx context.Context, resource schema.GroupVersionResource, namespace, fieldSelector, labelSelector string) (uint64, []ObjectVersion, error)
}

// ObjectVersion is one object of a SelectedVersions list.
type ObjectVersion struct {
	Namespace, Name string
	RV              uint64
}

// How a consistent read ended.
const (
	// consistentFresh: the cache had reached kube-apiserver's version.
	consistentFresh = "fresh"
	// consistentCaughtUp: the cache reached it within the bound.
	consistentCaughtUp = "caught_up"
	// consistentConfirmed: the cache had not reached the version (a quiet
	// type), and held what kube-apiserver listed for the operation.
	consistentConfirmed = "confirmed"
	// consistentTooLarge: 504 "Too large resource version" after the
	// bound; the endpoint asks kube-apiserver instead.
	consistentTooLarge = "too_large"
	// consistentUnavailable: kube-apiserver could not be asked; 500
	// ServerTimeout, its own answer when etcd does not answer.
	consistentUnavailable = "unavailable"
	// consistentGone: the request ended while it waited.
	consistentGone = "gone"
)

// errNobodyToAsk: the catalog was built without AskLatest.
var errNobodyToAsk = errors.New("nodeproxy has no kube-apiserver to ask for its current resourceVersion")

// ConsistentVersion is kube-apiserver's resourceVersion of s's type at a
// moment after the call began: the answer to a question sent after it
// (LatestChecker, shared by every read of the type waiting for one). A
// request with several operations of one type asks once: they all
// arrived together.
func (c *Catalog) ConsistentVersion(ctx context.Context, s *cache.Store, verb string) (uint64, error) {
	if c.latest == nil {
		observeConsistentRead(s, consistentUnavailable, 0)
		return 0, storageUnavailable(s, verb, errNobodyToAsk)
	}
	rv, err := c.latest.current(ctx, s.Resource)
	switch {
	case err == nil:
		return rv, nil
	case ctx.Err() != nil:
		observeConsistentRead(s, consistentGone, 0)
		return 0, apierrors.NewTimeoutError("request ended while waiting for kube-apiserver's resourceVersion", 1)
	}
	observeConsistentRead(s, consistentUnavailable, 0)
	klog.V(2).InfoS("Refused a consistent read: kube-apiserver could not be asked its resourceVersion", "resource", s.Resource.Resource, "err", err)
	return 0, storageUnavailable(s, verb, err)
}

// ReadConsistent returns a state of q's type that holds every change
// kube-apiserver had made when the request arrived, kube-apiserver's
// meaning of resourceVersion "" (a consistent read), given latest, a
// ConsistentVersion asked for this request; start is when it began
// asking (the wait metric counts from there).
//
// A state at latest or later is one. The cache of a quiet type reaches
// latest only with its next bookmark, so after StoreLagAllowance (what
// a change in flight needs) the operation's own selection is listed from
// kube-apiserver and a state that holds exactly those objects, each at
// its listed version or later, is one too, for this operation: nothing
// it selects changed between the state and latest. An operation
// that selects with bulk.k8s.io/reachableFrom lists what kube-apiserver
// can select of it (kubeSelection) and keeps what the graph reaches.
// Either way the wait ends after freshnessTimeout with 504 "Too
// large resource version", as kube-apiserver's watch cache ends one, and
// the node endpoint then asks kube-apiserver.
func (c *Catalog) ReadConsistent(ctx context.Context, q *Query, latest uint64, start time.Time) (*cache.Snapshot, error) {
	s := q.store
	if snap := s.Snapshot(); snap.RV >= latest {
		observeConsistentRead(s, consistentFresh, time.Since(start))
		return snap, nil
	}
	deadline := time.Now().Add(freshnessTimeout)
	if snap, err := awaitVersion(ctx, s, latest, time.Now().Add(StoreLagAllowance)); err == nil {
		observeConsistentRead(s, consistentCaughtUp, time.Since(start))
		return snap, nil
	}
	lister, ok := c.latest.source.(SelectedVersions)
	if !ok {
		return c.finishConsistent(ctx, q, start, func() (*cache.Snapshot, string, error) {
			snap, err := awaitVersion(ctx, s, latest, deadline)
			return snap, consistentCaughtUp, err
		})
	}
	listCtx, cancel := context.WithDeadline(ctx, deadline)
	fieldSelector, keep := c.kubeSelection(q)
	listRV, listed, err := lister.SelectedVersions(listCtx, s.Resource, q.namespace, fieldSelector, q.labels.String())
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			observeConsistentRead(s, consistentGone, time.Since(start))
			return nil, apierrors.NewTimeoutError("request ended while waiting for kube-apiserver's list", 1)
		}
		observeConsistentRead(s, consistentUnavailable, time.Since(start))
		klog.V(2).InfoS("Refused a consistent read: kube-apiserver could not list the operation's objects", "resource", s.Resource.Resource, "err", err)
		return nil, storageUnavailable(s, q.verb(), err)
	}
	want := make(map[[2]string]uint64, len(listed))
	for _, o := range listed {
		if keep(o) {
			want[[2]string{o.Namespace, o.Name}] = o.RV
		}
	}
	return c.finishConsistent(ctx, q, start, func() (*cache.Snapshot, string, error) {
		waitCtx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		for snap := s.Snapshot(); ; {
			switch {
			case snap.RV >= max(latest, listRV):
				return snap, consistentCaughtUp, nil
			case c.holds(q, snap, want):
				return snap, consistentConfirmed, nil
			}
			select {
			case <-snap.Next():
				snap = s.Snapshot()
			case <-waitCtx.Done():
				if ctx.Err() != nil {
					return nil, "", apierrors.NewTimeoutError("request ended while waiting for the cache", 1)
				}
				return nil, "", tooLargeResourceVersion(latest, snap.RV)
			}
		}
	})
}

// finishConsistent runs wait and counts how it ended.
func (c *Catalog) finishConsistent(ctx context.Context, q *Query, start time.Time, wait func() (*cache.Snapshot, string, error)) (*cache.Snapshot, error) {
	snap, result, err := wait()
	switch {
	case err == nil:
	case ctx.Err() != nil:
		result = consistentGone
	default:
		result = consistentTooLarge
		klog.V(2).InfoS("Refused a consistent read: the cache did not catch up with kube-apiserver in time", "resource", q.store.Resource.Resource, "cached", q.store.Snapshot().RV)
	}
	observeConsistentRead(q.store, result, time.Since(start))
	return snap, err
}

// kubeSelection is q's selection as kube-apiserver can list it: q's
// field selector, with bulk.k8s.io/reachableFrom replaced by what it
// means where kube-apiserver has a field for it (a node's pods, its Node)
// and otherwise dropped, the graph then keeping what the node reaches.
func (c *Catalog) kubeSelection(q *Query) (string, func(ObjectVersion) bool) {
	all := func(ObjectVersion) bool { return true }
	if q.reachableFrom == "" {
		return q.fieldSelector.String(), all
	}
	sel := make([]fields.Selector, 0, len(q.fields)+1)
	for _, r := range q.fields {
		if r.Operator == selection.NotEquals {
			sel = append(sel, fields.OneTermNotEqualSelector(r.Field, r.Value))
		} else {
			sel = append(sel, fields.OneTermEqualSelector(r.Field, r.Value))
		}
	}
	keep := all
	switch {
	case q.store.Resource.Resource == "nodes":
		sel = append(sel, fields.OneTermEqualSelector(fieldName, q.reachableFrom))
	case q.kind == graph.Pod:
		sel = append(sel, fields.OneTermEqualSelector(fieldNodeName, q.reachableFrom))
	default:
		node, kind := q.reachableFrom, q.kind
		keep = func(o ObjectVersion) bool {
			return c.graph.Reachable(node, graph.ObjectRef{Kind: kind, Namespace: o.Namespace, Name: o.Name})
		}
	}
	return fields.AndSelectors(sel...).String(), keep
}

// holds reports whether snap selects for q exactly the objects of want,
// each at its listed version or later.
func (c *Catalog) holds(q *Query, snap *cache.Snapshot, want map[[2]string]uint64) bool {
	n, ok := 0, true
	q.Ascend(snap, q.namespace, "", func(o *cache.Object) bool {
		if !q.Matches(o, c.graph) {
			return true
		}
		rv, listed := want[[2]string{o.Namespace, o.Name}]
		if ok = listed && o.RV >= rv; !ok {
			return false
		}
		n++
		return true
	})
	return ok && n == len(want)
}

// verb is what q amounts to on kube-apiserver, for its errors.
func (q *Query) verb() string {
	if q.watch {
		return "watch"
	}
	return "list"
}

// storageUnavailable is kube-apiserver's answer to a read it cannot
// serve because etcd does not answer (storage.InterpretListError): 500
// ServerTimeout, which clients retry. Never the cache's state instead: it
// may be older than what the client was already shown.
func storageUnavailable(s *cache.Store, verb string, cause error) error {
	err := apierrors.NewServerTimeout(s.Resource.GroupResource(), verb, 2)
	err.ErrStatus.Message = fmt.Sprintf("%s: a consistent read (resourceVersion \"\") needs kube-apiserver's current resourceVersion: %v", err.ErrStatus.Message, cause)
	return err
}
