package cache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/shard"
)

// Hold makes the cache hold the per-node types' objects of the nodes in
// set's ranges, and no others, as a sharded replica's membership
// changes. Every other type is held whole whatever set is.
//
// Ranges dropped: their objects leave the stores without change-log
// events (nobody here serves those nodes any longer: the hub moves
// their connections first, and a DELETED sent to a kubelet would stop
// its pods); the handlers (the graph) see them deleted. Ranges added:
// each per-node type is listed from kube-apiserver and its objects of
// those ranges taken in without events (acquire.go has why the log
// stays whole); the handlers see them added; HeldSince says from when
// their nodes' changes are in the log.
//
// Hold may run while the reflectors write; one Hold runs at a time. An
// error leaves some added ranges unheld (the dropped ones are dropped);
// calling Hold again acquires them.
func (c *Cache) Hold(ctx context.Context, set shard.Set) error {
	c.holdMu.Lock()
	defer c.holdMu.Unlock()
	var errs []error
	for _, gvr := range Watched() {
		s := c.stores[gvr]
		if s.nodeOf == nil {
			continue
		}
		s.holdOnly(set)
		held, _ := s.Held()
		if added := set.Minus(held); added.Len() > 0 {
			if err := c.acquire(ctx, s, added); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// holdOnly drops what the store holds of ranges outside set, silently.
func (s *Store) holdOnly(set shard.Set) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.holdingLocked()
	gone := h.held.Minus(set)
	if gone.Len() == 0 {
		if s.hold.Load() == nil {
			s.setHoldLocked(h.held, h.since) // sharded from now on
		}
		return
	}
	var out []*Object
	s.objects.Ascend(func(o *Object) bool {
		if node, perNode := s.nodeOf(o); perNode && node != "" && gone.HasNode(node) {
			out = append(out, o)
		}
		return true
	})
	for _, o := range out {
		s.objects.Delete(o)
		if s.nodes != nil {
			s.nodes.Delete(o)
		}
		if len(s.handlers) > 0 {
			old := s.typedLocked(o)
			for _, h := range s.handlers {
				h.OnDelete(old)
			}
		}
	}
	s.setHoldLocked(h.held.Minus(gone), h.since)
	s.publishLocked(nil)
	s.metrics.dropped.Add(float64(len(out)))
	klog.V(2).InfoS("Cache dropped ranges", "resource", s.Resource.Resource, "ranges", gone.Len(), "objects", len(out))
}

// acquire makes s hold ranges too.
func (c *Cache) acquire(ctx context.Context, s *Store, ranges shard.Set) error {
	start := time.Now()
	if !s.beginAcquire(ranges) {
		return nil
	}
	if c.list == nil {
		s.abortAcquire()
		s.metrics.acquireError.Inc()
		return fmt.Errorf("acquire %s: the cache has no client to list with", s.Resource.Resource)
	}
	objs, listRV, err := c.list(ctx, s, func(o *Object) bool {
		node, perNode := s.nodeOf(o)
		return perNode && node != "" && ranges.HasNode(node)
	})
	var since uint64
	if err == nil {
		since, err = s.finishAcquire(s.prepare(objs), listRV)
	} else {
		s.abortAcquire()
	}
	s.metrics.acquisition.Observe(time.Since(start).Seconds())
	if err != nil {
		s.metrics.acquireError.Inc()
		return fmt.Errorf("acquire %d ranges of %s: %w", ranges.Len(), s.Resource.Resource, err)
	}
	s.metrics.acquiredOK.Inc()
	klog.V(2).InfoS("Cache acquired ranges", "resource", s.Resource.Resource, "ranges", ranges.Len(), "objects", len(objs),
		"listResourceVersion", listRV, "heldSince", since, "duration", time.Since(start))
	return nil
}

// listFunc lists s's type from kube-apiserver consistently and returns
// the objects keep wants, and the list's version.
type listFunc func(ctx context.Context, s *Store, keep func(*Object) bool) ([]*Object, uint64, error)

// acquireListPage is the page size of an acquisition's list: client-go's
// pager's, so that kube-apiserver serves it as it serves the reflectors'
// lists, and a page of pods decoded at a time costs a few MiB.
const acquireListPage = 500

// clientLister lists with client: one consistent list of the whole type
// (resourceVersion "": etcd's latest revision, so never older than what
// the store has seen), by pages, keeping what keep wants as it goes.
// Listing only the acquired nodes' objects with a spec.nodeName field
// selector per node would spare kube-apiserver the other nodes' objects;
// that is a later optimisation.
func clientLister(client kubernetes.Interface) listFunc {
	return func(ctx context.Context, s *Store, keep func(*Object) bool) ([]*Object, uint64, error) {
		r, ok := resourceOf(s.Resource)
		if !ok {
			return nil, 0, fmt.Errorf("%s is not cached", s.Resource.Resource)
		}
		opts := metav1.ListOptions{Limit: acquireListPage}
		var out []*Object
		var listRV uint64
		for {
			list, err := r.client(client).Get().Resource(r.gvr.Resource).VersionedParams(&opts, scheme.ParameterCodec).Do(ctx).Get()
			if err != nil {
				return nil, 0, fmt.Errorf("list %s: %w", r.gvr.Resource, err)
			}
			lm, err := meta.ListAccessor(list)
			if err != nil {
				return nil, 0, fmt.Errorf("list %s: %w", r.gvr.Resource, err)
			}
			if listRV == 0 { // every page is at the first one's version
				if listRV, err = parseRV(lm.GetResourceVersion()); err != nil {
					return nil, 0, fmt.Errorf("list %s: %w", r.gvr.Resource, err)
				}
			}
			items, err := meta.ExtractList(list)
			if err != nil {
				return nil, 0, fmt.Errorf("list %s: %w", r.gvr.Resource, err)
			}
			for _, item := range items {
				o, err := newObject(item)
				if err != nil {
					return nil, 0, fmt.Errorf("list %s: %w", r.gvr.Resource, err)
				}
				if keep(o) {
					// A copy, so that what is kept does not keep the
					// page's array of every other item alive.
					if o, err = newObject(o.obj.DeepCopyObject()); err != nil {
						return nil, 0, fmt.Errorf("list %s: %w", r.gvr.Resource, err)
					}
					out = append(out, o)
				}
			}
			if opts.Continue = lm.GetContinue(); opts.Continue == "" {
				return out, listRV, nil
			}
		}
	}
}

// givenLister lists with list (Options.List).
func givenLister(list ListFunc) listFunc {
	return func(ctx context.Context, s *Store, keep func(*Object) bool) ([]*Object, uint64, error) {
		objs, rv, err := list(ctx, s.Resource)
		if err != nil {
			return nil, 0, fmt.Errorf("list %s: %w", s.Resource.Resource, err)
		}
		listRV, err := parseRV(rv)
		if err != nil {
			return nil, 0, fmt.Errorf("list %s: %w", s.Resource.Resource, err)
		}
		var out []*Object
		for _, obj := range objs {
			o, err := newObject(obj)
			if err != nil {
				return nil, 0, fmt.Errorf("list %s: %w", s.Resource.Resource, err)
			}
			if keep(o) {
				out = append(out, o)
			}
		}
		return out, listRV, nil
	}
}

// resourceOf is the cached type of gvr.
func resourceOf(gvr schema.GroupVersionResource) (resource, bool) {
	for _, r := range append(slices.Clone(served), unserved...) {
		if r.gvr == gvr {
			return r, true
		}
	}
	return resource{}, false
}
