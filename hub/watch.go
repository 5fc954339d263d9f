package hub

import (
	"net/http"
	"sync/atomic"

	"github.com/nodeproxy/nodeproxy/watchmux"
)

// upgradeRouter sends bulk watch upgrades (GET bulkgetoperations?watch=1
// with a websocket upgrade) to the watch server, after the whole filter
// chain (authentication, authorization of verb watch on
// bulkgetoperations, audit, ...) has run, and everything else to the
// generic server's handlers. The handler chain is built before the watch
// server exists, hence the late binding.
type upgradeRouter struct {
	watch atomic.Pointer[watchmux.Server]
}

func (u *upgradeRouter) wrap(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == watchmux.Path && watchmux.IsUpgrade(r) {
			if s := u.watch.Load(); s != nil {
				s.ServeHTTP(w, r)
				return
			}
		}
		api.ServeHTTP(w, r)
	})
}
