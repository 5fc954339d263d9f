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
//
// A sharded hub first sends a node that another replica owns there
// (shard), and ends a node's connection when its node moves.
type upgradeRouter struct {
	watch  atomic.Pointer[watchmux.Server]
	reauth atomic.Pointer[reauthenticator]
	shard  atomic.Pointer[shardRouter]
}

func (u *upgradeRouter) wrap(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sharded := u.shard.Load()
		if isBulkWatchUpgrade(r) {
			if s := u.watch.Load(); s != nil {
				if sharded != nil && sharded.route(w, r, "watch") {
					return
				}
				ctx, cancel := context.WithCancel(connectionContext(r))
				// One slot for each of the two that may end the
				// connection, each at most once, so neither blocks.
				end := make(chan *metav1.Status, 2)
				if a := u.reauth.Load(); a != nil {
					a.followInto(ctx, r, end)
				}
				if sharded != nil {
					sharded.follow(ctx, r, end)
				}
				s.ServeDetached(ctx, w, r, end, cancel)
				return
			}
		}
		if sharded != nil && isBulkGet(r) && sharded.route(w, r, "get") {
			return
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
