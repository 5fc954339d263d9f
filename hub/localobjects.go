package hub

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
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
type cachedObjects struct {
	stores      map[string]*cache.Store
	heardWithin time.Duration
	now         func() time.Time
}

func newCachedObjects(objects *cache.Cache, heardWithin time.Duration) *cachedObjects {
	c := &cachedObjects{stores: map[string]*cache.Store{}, heardWithin: heardWithin, now: time.Now}
	for _, gvr := range cache.Watched() {
		if s := objects.Store(gvr); s != nil && gvr.Group == "" {
			c.stores[gvr.Resource] = s
		}
	}
	return c
}

func (c *cachedObjects) lookup(resource, namespace, name string) (metav1.Object, lookupResult) {
	s := c.stores[resource]
	if s == nil || !s.HeardWithin(c.now(), c.heardWithin) {
		return nil, lookupStale
	}
	o, ok := s.Snapshot().Get(namespace, name)
	if !ok {
		return nil, lookupMissing
	}
	// A pod is kept as kube-apiserver's bytes: decoded here, once a
	// check, for its UID and deletionTimestamp. One that cannot be read
	// is left to a review.
	obj, err := o.Typed()
	if err != nil {
		return nil, lookupStale
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, lookupStale
	}
	return m, lookupFound
}
