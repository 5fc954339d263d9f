package hub

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/shard"
)

// shardHolder keeps a sharded replica's cache holding the ranges its
// table gives it (cache.Cache.Hold). Ranges gained are acquired at once:
// a replica serves a range's nodes as soon as its table and the
// replicas' readiness send them here. Ranges lost are dropped only
// dropAfter later, once the router has ended the connections of their
// nodes (moveSpread): the cache drops without events, so a node still
// served here would be shown nothing of its pods' end, and the graph
// would refuse it what they use.
type shardHolder struct {
	cache     *cache.Cache
	members   *Membership
	dropAfter time.Duration
	kick      chan struct{}
}

// holdRetry paces a Hold that failed (kube-apiserver refused a list):
// the ranges it could not acquire are served by their other holder
// meanwhile.
const holdRetry = 5 * time.Second

func newShardHolder(c *cache.Cache, m *Membership) *shardHolder {
	h := &shardHolder{cache: c, members: m, dropAfter: moveSpread + 5*time.Second, kick: make(chan struct{}, 1)}
	m.OnChange(func(_, _ *shard.Table) { h.poke() })
	return h
}

func (h *shardHolder) poke() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// start narrows the cache, before its first list, to the ranges of the
// first table: nothing is listed that the replica does not hold.
func (h *shardHolder) start(ctx context.Context) error {
	return h.cache.Hold(ctx, h.members.Held())
}

// run follows the table until ctx ends.
func (h *shardHolder) run(ctx context.Context) {
	var drop <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.kick:
			// Keep what is held, add what is wanted; drop later.
			want := h.members.Held()
			held, _ := h.cache.Store(podsResource).Held()
			if err := h.cache.Hold(ctx, want.Union(held)); err != nil {
				klog.ErrorS(err, "Acquiring the ranges of the shard table; trying again", "retryIn", holdRetry)
				time.AfterFunc(holdRetry, h.poke)
				continue
			}
			if want != want.Union(held) {
				drop = time.After(h.dropAfter)
			} else {
				drop = nil
			}
		case <-drop:
			drop = nil
			if err := h.cache.Hold(ctx, h.members.Held()); err != nil {
				klog.ErrorS(err, "Holding the ranges of the shard table; trying again", "retryIn", holdRetry)
				time.AfterFunc(holdRetry, h.poke)
			}
		}
	}
}
