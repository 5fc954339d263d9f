package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// heard is what one node has read of the event a scenario waits for: how
// many, and when the last one arrived.
type heard struct {
	events atomic.Int64
	at     atomic.Int64 // unix nanoseconds
}

func newHeards(n int) []*heard {
	hs := make([]*heard, n)
	for i := range hs {
		hs[i] = &heard{}
	}
	return hs
}

// record notes one more event, arrived now.
func (h *heard) record() {
	h.at.Store(time.Now().UnixNano())
	h.events.Add(1)
}

// since is how long after start the last event arrived.
func (h *heard) since(start time.Time) time.Duration {
	return time.Duration(h.at.Load() - start.UnixNano())
}

// waitHeard waits until every hs[i] has read want(i) events, failed (when
// not nil) reports a watcher's error, or a minute passes. The poll is
// short: it paces the rounds, while the times come from record.
func waitHeard(ctx context.Context, failed func() error, hs []*heard, want func(i int) int64) error {
	i := 0
	err := wait.PollUntilContextTimeout(ctx, 200*time.Microsecond, time.Minute, true, func(context.Context) (bool, error) {
		for ; i < len(hs); i++ {
			if hs[i].events.Load() < want(i) {
				if failed != nil {
					return false, failed()
				}
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && ctx.Err() == nil && wait.Interrupted(err) {
		return fmt.Errorf("node %d read %d of %d events within a minute", i, hs[i].events.Load(), want(i))
	}
	return err
}
