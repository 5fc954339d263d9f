package passthrough

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
)

// MinRefreshInterval is the least time between two discovery requests
// for one group/version. A CRD created after start is found by the first
// request that misses at least this long after the previous fetch, so a
// caller that sees 422 for a type it has just created succeeds on a retry
// a second later; a stream of requests naming types that do not exist
// costs kube-apiserver one discovery request per group/version per
// second, not one per request.
const MinRefreshInterval = time.Second

// maxGroupVersions bounds the cache. A cluster serves a few hundred
// group/versions; the bound is there for callers that name made-up
// ones, whose negative entries are dropped first.
const maxGroupVersions = 4096

// Type is what discovery says of a resource.
type Type struct {
	Resource   schema.GroupVersionResource
	Kind       string
	Namespaced bool
	verbs      []string
}

// Supports reports whether the type serves verb (list, watch).
func (t Type) Supports(verb string) bool { return slices.Contains(t.verbs, verb) }

// discoverer is the part of client-go's discovery client the resolver
// uses: one group/version's resources (GET /apis/<group>/<version>).
type discoverer interface {
	ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error)
}

// Resolver says which resource types exist, from kube-apiserver's
// discovery, which includes CRDs and aggregated APIs. Each group/version
// is fetched on first use and again on a miss (see MinRefreshInterval):
// the whole discovery document is never fetched, so resolving one type
// costs one small request, not one per group.
type Resolver struct {
	discovery discoverer
	clock     clock.PassiveClock
	fetches   singleflight.Group

	mu      sync.Mutex
	entries map[string]*gvEntry // guarded by mu; by group/version
}

type gvEntry struct {
	exists    bool
	resources map[string]metav1.APIResource
	fetched   time.Time
}

// NewResolver resolves types with d, for example a client-go discovery
// client.
func NewResolver(d discoverer) *Resolver {
	return &Resolver{discovery: d, clock: clock.RealClock{}, entries: map[string]*gvEntry{}}
}

// Resolve returns the type r names. found is false when kube-apiserver
// does not serve it (as of the last fetch); err is set only when
// discovery itself failed, which is not an answer either way.
// Subresources (pods/status) are not types and are never found.
func (r *Resolver) Resolve(gvr schema.GroupVersionResource) (t Type, found bool, err error) {
	if gvr.Version == "" || gvr.Resource == "" || strings.Contains(gvr.Resource, "/") {
		return Type{}, false, nil
	}
	gv := gvr.GroupVersion().String()
	r.mu.Lock()
	e := r.entries[gv]
	r.mu.Unlock()
	if t, ok := e.lookup(gvr); ok {
		return t, true, nil
	}
	if e != nil && r.clock.Since(e.fetched) < MinRefreshInterval {
		return Type{}, false, nil
	}
	v, err, _ := r.fetches.Do(gv, func() (any, error) { return r.fetch(gv) })
	if err != nil {
		return Type{}, false, err
	}
	t, ok := v.(*gvEntry).lookup(gvr)
	return t, ok, nil
}

func (e *gvEntry) lookup(gvr schema.GroupVersionResource) (Type, bool) {
	if e == nil || !e.exists {
		return Type{}, false
	}
	res, ok := e.resources[gvr.Resource]
	if !ok {
		return Type{}, false
	}
	return Type{Resource: gvr, Kind: res.Kind, Namespaced: res.Namespaced, verbs: res.Verbs}, true
}

func (r *Resolver) fetch(gv string) (*gvEntry, error) {
	list, err := r.discovery.ServerResourcesForGroupVersion(gv)
	e := &gvEntry{fetched: r.clock.Now(), resources: map[string]metav1.APIResource{}}
	switch {
	case apierrors.IsNotFound(err):
		discoveryFetches.WithLabelValues("absent").Inc()
	case err != nil:
		discoveryFetches.WithLabelValues("error").Inc()
		return nil, fmt.Errorf("discover %s: %w", gv, err)
	default:
		discoveryFetches.WithLabelValues("found").Inc()
		e.exists = true
		for _, res := range list.APIResources {
			if !strings.Contains(res.Name, "/") {
				e.resources[res.Name] = res
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.entries) >= maxGroupVersions {
		for k, old := range r.entries {
			if !old.exists {
				delete(r.entries, k)
			}
		}
	}
	if len(r.entries) < maxGroupVersions || e.exists {
		r.entries[gv] = e
	}
	return e, nil
}
