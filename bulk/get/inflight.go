package get

import (
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// inFlight bounds the bulk gets one identity has in flight, so that one
// node (or one compromised node's credentials) cannot take every worker of
// the hub, which is also kube-apiserver's node authorizer, from the
// others. kube-apiserver's own max-in-flight (400 by default) is shared by
// everyone; this is per caller.
type inFlight struct {
	limit int
	mu    sync.Mutex
	held  map[string]int // guarded by mu: user name -> requests in flight
}

func newInFlight(limit int) *inFlight {
	return &inFlight{limit: limit, held: map[string]int{}}
}

// acquire takes a slot for user, or returns 429 with Retry-After (client-go
// retries it) when user already has limit requests in flight. release
// gives the slot back; call it once.
func (f *inFlight) acquire(user string) (release func(), err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held[user] >= f.limit {
		return nil, apierrors.NewTooManyRequests(fmt.Sprintf(
			"%d bulk gets of %q are already in flight, the most allowed per caller (--bulk-get-max-in-flight-per-user); retry when one has been answered",
			f.held[user], user), 1)
	}
	f.held[user]++
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.held[user]--; f.held[user] == 0 {
			delete(f.held, user)
		}
	}, nil
}
