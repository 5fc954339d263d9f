package hub

import (
	"context"
	"net/http"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/request"

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
				ctx, cancel := context.WithCancel(connectionContext(r))
				var end <-chan *metav1.Status
				if a := u.reauth.Load(); a != nil {
					end = a.follow(ctx, r)
				}
				s.ServeDetached(ctx, w, r, end, cancel)
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

// connectionContext is what a bulk watch connection is served under: the
// caller the chain authenticated, which the channels' handlers authorize,
// and nothing else of r's context. The connection is served detached
// from the request (watchmux.Server.ServeDetached), so that the chain's
// state for the request (its contexts' values: audit, tracing, latency
// tracking, the request's info) is let go of once it is upgraded, not
// held for the connection's hours.
func connectionContext(r *http.Request) context.Context {
	ctx := context.Background()
	if u, ok := request.UserFrom(r.Context()); ok {
		ctx = request.WithUser(ctx, u)
	}
	return ctx
}
