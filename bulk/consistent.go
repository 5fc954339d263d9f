package bulk

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/cache"
)

// How a consistent read ended.
const (
	// consistentFresh: the cache had reached kube-apiserver's version.
	consistentFresh = "fresh"
	// consistentCaughtUp: the cache reached it within the bound.
	consistentCaughtUp = "caught_up"
	// consistentConfirmed: the cache had not reached the version (a quiet
	// type), and a probe showed that nothing of the type had changed
	// between the cache's version and it.
	consistentConfirmed = "confirmed"
	// consistentTooLarge: 504 "Too large resource version" after the
	// bound; the endpoint asks kube-apiserver instead.
	consistentTooLarge = "too_large"
	// consistentUnavailable: kube-apiserver could not be asked; 500
	// ServerTimeout, its own answer when etcd does not answer.
	consistentUnavailable = "unavailable"
	// consistentGone: the request ended while it waited.
	consistentGone = "gone"
	// consistentUnsynced: 504 at once, the type's first list not yet in
	// the cache; the endpoint asks kube-apiserver instead.
	consistentUnsynced = "unsynced"
)

// consistentBudget bounds a consistent read, from its arrival to its
// answer or its 504: kube-apiserver's version (latestVersionTimeout, asked
// again once if the first question fails in time), then the cache or a
// probe (progressTimeout). The node endpoint gives the hub 10 s
// (endpoint.hubRequestTimeout) before it asks kube-apiserver itself: 8 s
// leaves it that room. kube-apiserver's own consistent read waits 3 s for
// its cache, then reads etcd; the endpoint asking kube-apiserver is this
// read's etcd, and it costs a watch on kube-apiserver that lasts the
// kubelet's watch: waiting longer for the hub is cheaper.
const consistentBudget = 8 * time.Second

// errNobodyToAsk: the catalog was built without AskLatest.
var errNobodyToAsk = errors.New("nodeproxy has no kube-apiserver to ask for its current resourceVersion")

// ConsistentVersion is kube-apiserver's resourceVersion of s's type at a
// moment after the call began: the answer to a question sent after it
// (LatestChecker, shared by every read of the type waiting for one),
// asked again once if the first fails while the read's budget allows
// another. A request with several operations of one type asks once: they
// all arrived together. start is when the read arrived.
func (c *Catalog) ConsistentVersion(ctx context.Context, s *cache.Store, verb string, start time.Time) (uint64, error) {
	return c.consistentVersion(ctx, s, verb, start, start.Add(consistentBudget))
}

// consistentVersion is ConsistentVersion within deadline.
func (c *Catalog) consistentVersion(ctx context.Context, s *cache.Store, verb string, start, deadline time.Time) (uint64, error) {
	if !s.HasSynced() {
		return 0, refuseUnsynced(s)
	}
	if c.latest == nil {
		observeConsistentRead(s, consistentUnavailable, 0)
		return 0, storageUnavailable(s, verb, errNobodyToAsk)
	}
	if c.progress != nil {
		c.progress.prime(s)
	}
	askCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	rv, err := c.latest.current(askCtx, s.Resource)
	if err != nil && ctx.Err() == nil && time.Until(deadline) > latestVersionTimeout/2 {
		rv, err = c.latest.current(askCtx, s.Resource)
	}
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
// ConsistentVersion asked for this request; start is when the read
// arrived (its budget and the wait metric count from there).
//
// A state at latest or later is one. A busy type's cache reaches latest
// with the next change kube-apiserver sends it. A quiet type's reaches it
// only with its next bookmark, up to a minute away, so probes
// (ProgressChecker, pipelined per type and shared by every read waiting)
// ask kube-apiserver whether anything of the type changed since the
// cache's version; whichever comes first serves. Either way the wait ends with the
// read's consistentBudget with 504 "Too large resource version", as
// kube-apiserver's watch cache ends one, and the node endpoint then asks
// kube-apiserver.
func (c *Catalog) ReadConsistent(ctx context.Context, q *Query, latest uint64, start time.Time) (*cache.Snapshot, error) {
	return c.readConsistent(ctx, q.store, latest, start, start.Add(consistentBudget))
}

// FreshVersion is a consistent read of s's type without the objects: a
// resourceVersion V such that the store, once at V, holds every change
// kube-apiserver had made of the type when start came. It asks and
// waits as ConsistentVersion and ReadConsistent do, sharing their
// questions and probes, within budget rather than consistentBudget; the
// error is theirs (504 the store not shown current in time, 500
// kube-apiserver not asked). The node view answers a progress request
// only at such versions: its consumer serves consistent reads from the
// answer.
func (c *Catalog) FreshVersion(ctx context.Context, s *cache.Store, start time.Time, budget time.Duration) (uint64, error) {
	deadline := start.Add(budget)
	latest, err := c.consistentVersion(ctx, s, "watch", start, deadline)
	if err != nil {
		return 0, err
	}
	snap, err := c.readConsistent(ctx, s, latest, start, deadline)
	if err != nil {
		return 0, err
	}
	return snap.RV, nil
}

// readConsistent is ReadConsistent of s within deadline.
func (c *Catalog) readConsistent(ctx context.Context, s *cache.Store, latest uint64, start, deadline time.Time) (*cache.Snapshot, error) {
	if !s.HasSynced() {
		return nil, refuseUnsynced(s)
	}
	if snap := s.Snapshot(); snap.RV >= latest {
		observeConsistentRead(s, consistentFresh, time.Since(start))
		return snap, nil
	}
	if c.progress != nil {
		probeCtx, cancel := context.WithDeadline(ctx, deadline)
		snap, how, err := c.progress.confirm(probeCtx, s, latest)
		cancel()
		if err == nil {
			result := consistentConfirmed
			if how == progressStore {
				result = consistentCaughtUp
			}
			observeConsistentRead(s, result, time.Since(start))
			return snap, nil
		}
		if ctx.Err() == nil && time.Now().Before(deadline) {
			klog.V(2).InfoS("A consistent read waits for the cache alone: kube-apiserver's progress could not be asked", "resource", s.Resource.Resource, "err", err)
		}
	}
	snap, err := awaitVersion(ctx, s, latest, deadline)
	switch {
	case err == nil:
		observeConsistentRead(s, consistentCaughtUp, time.Since(start))
	case ctx.Err() != nil:
		observeConsistentRead(s, consistentGone, time.Since(start))
	default:
		observeConsistentRead(s, consistentTooLarge, time.Since(start))
		klog.V(2).InfoS("Refused a consistent read: the cache was not shown current in time", "resource", s.Resource.Resource, "latest", latest, "cached", s.Snapshot().RV)
	}
	return snap, err
}

// refuseUnsynced refuses a consistent read of a store whose first list is
// not in yet (a replica starting, its Service readiness not yet passed):
// 504 "Too large resource version" at once, on which the node endpoint
// asks kube-apiserver, as kube-apiserver's own cache, not ready, hands a
// consistent list to etcd. Waiting for the list would cost the read its
// budget for an answer it can get elsewhere now; and no probe can stand
// in for the list: a store at no version would be probed with a watch
// from "0", whose synthetic ADDED events come in key order, so that the
// last of them, older than another object, proves nothing about a list
// answered in between (TestConsistentReadOfAStoreStillListingIsNotProvedByAProbeFromZero).
func refuseUnsynced(s *cache.Store) error {
	observeConsistentRead(s, consistentUnsynced, 0)
	klog.V(2).InfoS("Refused a consistent read: the type's first list is not in the cache yet", "resource", s.Resource.Resource)
	err := tooLargeResourceVersion(0, 0)
	err.(*apierrors.StatusError).ErrStatus.Message = fmt.Sprintf("Too large resource version: the cache of %s has not been listed yet", s.Resource.Resource)
	return err
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
