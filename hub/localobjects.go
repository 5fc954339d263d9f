package hub

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeproxy/nodeproxy/cache"
)

// cachedObjects is the hub's cache as the local check reads it: only a
// type whose store is current enough to stand in for kube-apiserver's
// informer (cache.Store.HeardWithin, with --node-view-heard-within, the
// bound the node views' consistent reads trust it within) answers; any
// other is stale, and the token is reviewed. kube-apiserver's
// authenticator reads its own informers the same way, milliseconds behind
// etcd.
//
// A type that is only quiet (its watch works, and nothing changed, so it
// has heard no more than a bookmark a minute, which may fall past
// heardWithin) is shown fresh by asking kube-apiserver once, for every
// check waiting on it, with the questions and probes of bulk's consistent
// reads; shown so at an instant, it is trusted for heardWithin after it,
// as a bookmark heard then would be. Without that, every bound token's
// check would become a TokenReview whenever one type went a minute and a
// half without news: hundreds of reviews, a thousand connections, for
// what one probe answers.
type cachedObjects struct {
	stores      map[string]*cache.Store
	heardWithin time.Duration
	now         func() time.Time
	// fresh shows a store as fresh as kube-apiserver (nil: a quiet type
	// is stale).
	fresh  freshness
	proofs singleflight.Group

	mu     sync.Mutex
	proven map[string]time.Time // by resource, the instant a proof showed it current at; guarded by mu
}

// freshness shows a store as fresh as kube-apiserver: *bulk.Catalog is
// one (nodeview.Freshness).
type freshness interface {
	FreshVersion(ctx context.Context, s *cache.Store, start time.Time, budget time.Duration) (uint64, error)
}

// proofBudget bounds one proof: a quiet type's probe gets its bookmark 1
// to 2.25 s in, as bulk's consistent reads and the node views' progress
// requests wait.
const proofBudget = 4 * time.Second

func newCachedObjects(objects *cache.Cache, heardWithin time.Duration, fresh freshness) *cachedObjects {
	c := &cachedObjects{stores: map[string]*cache.Store{}, heardWithin: heardWithin, now: time.Now, fresh: fresh, proven: map[string]time.Time{}}
	for _, gvr := range cache.Watched() {
		if s := objects.Store(gvr); s != nil && gvr.Group == "" {
			c.stores[gvr.Resource] = s
		}
	}
	return c
}

func (c *cachedObjects) lookup(resource, namespace, name string) (metav1.Object, lookupResult) {
	s := c.stores[resource]
	if s == nil || !s.HeardWithin(c.now(), c.heardWithin) && !c.provenFresh(resource, s) {
		return nil, lookupStale
	}
	o, ok := s.Snapshot().Get(namespace, name)
	if !ok {
		return nil, lookupMissing
	}
	// The key fields the cache keeps beside every object, decoded or kept
	// as kube-apiserver's bytes (a pod): the check decodes nothing.
	return &metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name, UID: o.UID, DeletionTimestamp: o.Deleting}, lookupFound
}

// provenFresh reports whether s, which has not heard from kube-apiserver
// within heardWithin, was shown as fresh as kube-apiserver within
// heardWithin, asking kube-apiserver if it was not: one proof a type at
// a time, which every check waiting on it shares.
func (c *cachedObjects) provenFresh(resource string, s *cache.Store) bool {
	if c.fresh == nil || c.heardWithin <= 0 {
		return false
	}
	if c.provenSince(resource) {
		return true
	}
	_, err, _ := c.proofs.Do(resource, func() (any, error) {
		if c.provenSince(resource) {
			return nil, nil // a proof that ended as this one began
		}
		start := c.now()
		ctx, cancel := context.WithTimeout(context.Background(), proofBudget)
		defer cancel()
		if _, err := c.fresh.FreshVersion(ctx, s, start, proofBudget); err != nil {
			localProofs.WithLabelValues(resource, "stale").Inc()
			return nil, err
		}
		localProofs.WithLabelValues(resource, "fresh").Inc()
		c.mu.Lock()
		c.proven[resource] = start
		c.mu.Unlock()
		return nil, nil
	})
	return err == nil
}

// provenSince reports whether the last proof of resource is within
// heardWithin.
func (c *cachedObjects) provenSince(resource string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.proven[resource]
	return ok && c.now().Sub(at) <= c.heardWithin
}
