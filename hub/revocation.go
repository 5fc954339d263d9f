package hub

import (
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
)

// boundObjects ends at once the connections whose ServiceAccount token
// names an object the cache sees deleted: the token's ServiceAccount, and
// the Secret, Pod or Node a TokenRequest bound it to (its kubernetes.io
// claims, by UID). kube-apiserver refuses such a token from then on (it
// looks each of them up, --service-account-lookup, on by default), once
// its own token cache (10 s) has let it go; the minute's re-check would
// see it up to a minute later, during which the token's channels would
// keep receiving what changes. So the deletion is taken as the refusal it
// will be: every channel ends with 401 and the connection closes, up to
// 10 s before kube-apiserver refuses a new request with the token, never
// after. Only a deletion seen by the cache counts, never an absence (a
// token bound to an object the cache has not yet seen created is not
// refused).
//
// The claims are read, not verified: the token authenticated when the
// connection opened, so they are kube-apiserver's own; a token of another
// issuer that names an object this way only makes its own connection end
// sooner.
type boundObjects struct {
	mu    sync.Mutex
	byUID map[types.UID]map[*revocation]struct{} // guarded by mu
}

// revocation is one connection's: done is closed once an object its
// token names is deleted; changed is signalled when one is marked for
// deletion (a deletionTimestamp: a pod in graceful deletion), from when
// the local check refuses it once the leeway has passed (localauthn.go).
type revocation struct {
	done    chan struct{}
	once    sync.Once
	changed chan struct{} // buffered 1: a signal not yet taken stands for any later one
	// deleting is the earliest deletionTimestamp seen of an object the
	// token names (unix nanoseconds; 0: none). The store runs its
	// handlers before it publishes the change, so the check the signal
	// wakes may read the object unmarked; this tells it when to check
	// again all the same.
	deleting atomic.Int64
}

func (r *revocation) revoke() { r.once.Do(func() { close(r.done) }) }

// mark records that an object the token names is to be deleted at at,
// and signals changed.
func (r *revocation) mark(at time.Time) {
	for {
		old := r.deleting.Load()
		if old != 0 && old <= at.UnixNano() || r.deleting.CompareAndSwap(old, at.UnixNano()) {
			break
		}
	}
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// deletingAt is the earliest deletionTimestamp marked; zero if none.
func (r *revocation) deletingAt() time.Time {
	if at := r.deleting.Load(); at != 0 {
		return time.Unix(0, at)
	}
	return time.Time{}
}

// boundResources are the types whose deletion revokes the tokens that
// name an object of them; each is cached.
var boundResources = []string{"secrets", "pods", "nodes", "serviceaccounts"}

func newBoundObjects() *boundObjects {
	return &boundObjects{byUID: map[types.UID]map[*revocation]struct{}{}}
}

// follow returns the revocation of a connection whose token names uids,
// and a stop to call when the connection ends. No uids: one never
// signalled.
func (b *boundObjects) follow(uids []types.UID) (*revocation, func()) {
	r := &revocation{done: make(chan struct{}), changed: make(chan struct{}, 1)}
	if b == nil || len(uids) == 0 {
		return r, func() {}
	}
	b.mu.Lock()
	for _, uid := range uids {
		if b.byUID[uid] == nil {
			b.byUID[uid] = map[*revocation]struct{}{}
		}
		b.byUID[uid][r] = struct{}{}
	}
	b.mu.Unlock()
	return r, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, uid := range uids {
			delete(b.byUID[uid], r)
			if len(b.byUID[uid]) == 0 {
				delete(b.byUID, uid)
			}
		}
	}
}

// deleted revokes every connection whose token names uid.
func (b *boundObjects) deleted(uid types.UID) {
	b.mu.Lock()
	rs := b.byUID[uid]
	delete(b.byUID, uid)
	b.mu.Unlock()
	for r := range rs {
		r.revoke()
	}
}

// marked tells every connection whose token names uid that it is to be
// deleted at at.
func (b *boundObjects) marked(uid types.UID, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for r := range b.byUID[uid] {
		r.mark(at)
	}
}

// handler hears the deletions of one of boundResources, and the updates
// that mark one for deletion. The store calls it under its lock: it only
// closes and signals channels.
func (b *boundObjects) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj interface{}) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if m, err := meta.Accessor(obj); err == nil {
				b.deleted(m.GetUID())
			}
		},
		UpdateFunc: func(_, obj interface{}) {
			if m, err := meta.Accessor(obj); err == nil && m.GetDeletionTimestamp() != nil {
				b.marked(m.GetUID(), m.GetDeletionTimestamp().Time)
			}
		},
	}
}
