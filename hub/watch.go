package hub

import (
	"context"
	"net/http"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeproxy/nodeproxy/watchmux"
)

// upgradeRouter sends bulk watch upgrades (GET bulkgetoperations?watch=1
// with a websocket upgrade) to the watch server, after the whole filter
// chain (authentication, authorization of verb watch on
// bulkgetoperations, audit, ...) has run, and everything else to the
// generic server's handlers. The handler chain is built before the watch
// server exists, hence the late binding.
//
// Each connection is followed by reauth, which ends it when its
// credential no longer authenticates or at its maximum age.
type upgradeRouter struct {
	watch  atomic.Pointer[watchmux.Server]
	reauth atomic.Pointer[reauthenticator]
}

func (u *upgradeRouter) wrap(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isBulkWatchUpgrade(r) {
			if s := u.watch.Load(); s != nil {
				ctx, cancel := context.WithCancel(r.Context())
				defer cancel()
				var end <-chan *metav1.Status
				if a := u.reauth.Load(); a != nil {
					end = a.follow(ctx, r)
				}
				s.ServeHTTPUntil(w, r, end)
				return
			}
		}
		api.ServeHTTP(w, r)
	})
}

// isBulkWatchUpgrade reports whether r opens a bulk watch connection.
func isBulkWatchUpgrade(r *http.Request) bool {
	return r.URL.Path == watchmux.Path && watchmux.IsUpgrade(r)
}
