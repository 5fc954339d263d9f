package hub

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
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

// revocation is one connection's: closed once an object its token names
// is deleted.
type revocation struct {
	done chan struct{}
	once sync.Once
}

func (r *revocation) revoke() { r.once.Do(func() { close(r.done) }) }

// boundResources are the types whose deletion revokes the tokens that
// name an object of them; each is cached.
var boundResources = []string{"secrets", "pods", "nodes", "serviceaccounts"}

func newBoundObjects() *boundObjects {
	return &boundObjects{byUID: map[types.UID]map[*revocation]struct{}{}}
}

// follow returns a channel closed when one of uids is deleted, and a
// stop to call when the connection ends. No uids: a channel never closed.
func (b *boundObjects) follow(uids []types.UID) (<-chan struct{}, func()) {
	r := &revocation{done: make(chan struct{})}
	if b == nil || len(uids) == 0 {
		return r.done, func() {}
	}
	b.mu.Lock()
	for _, uid := range uids {
		if b.byUID[uid] == nil {
			b.byUID[uid] = map[*revocation]struct{}{}
		}
		b.byUID[uid][r] = struct{}{}
	}
	b.mu.Unlock()
	return r.done, func() {
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

// handler hears the deletions of one of boundResources. The store calls
// it under its lock: it only closes channels.
func (b *boundObjects) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(obj interface{}) {
		if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if m, err := meta.Accessor(obj); err == nil {
			b.deleted(m.GetUID())
		}
	}}
}

// tokenClaims is what the hub reads of a JWT bearer token: when it
// expires, and the objects it is bound to.
type tokenClaims struct {
	Exp        *int64 `json:"exp"`
	Kubernetes *struct {
		Secret         *boundRef `json:"secret"`
		Pod            *boundRef `json:"pod"`
		Node           *boundRef `json:"node"`
		ServiceAccount *boundRef `json:"serviceaccount"`
	} `json:"kubernetes.io"`
}

type boundRef struct {
	UID types.UID `json:"uid"`
}

// claimsOf reads cred's bearer token's claims, unverified; false if it
// has no JWT bearer token.
func claimsOf(cred *credential) (tokenClaims, bool) {
	var claims tokenClaims
	auth := cred.header.Get("Authorization")
	scheme, token, ok := strings.Cut(strings.TrimSpace(auth), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return claims, false
	}
	parts := strings.Split(strings.TrimSpace(token), ".")
	if len(parts) != 3 {
		return claims, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return claims, false
	}
	if json.Unmarshal(payload, &claims) != nil {
		return claims, false
	}
	return claims, true
}

// boundUIDs are the objects cred's token names: its ServiceAccount and
// the object it is bound to.
func boundUIDs(cred *credential) []types.UID {
	claims, ok := claimsOf(cred)
	if !ok || claims.Kubernetes == nil {
		return nil
	}
	var uids []types.UID
	for _, ref := range []*boundRef{claims.Kubernetes.Secret, claims.Kubernetes.Pod, claims.Kubernetes.Node, claims.Kubernetes.ServiceAccount} {
		if ref != nil && ref.UID != "" {
			uids = append(uids, ref.UID)
		}
	}
	return uids
}

// tokenExpiry is cred's bearer token's exp claim.
func tokenExpiry(cred *credential) (time.Time, bool) {
	claims, ok := claimsOf(cred)
	if !ok || claims.Exp == nil {
		return time.Time{}, false
	}
	return time.Unix(*claims.Exp, 0), true
}
