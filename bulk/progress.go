package bulk

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodeproxy/nodeproxy/cache"
)

// Progress tells that kube-apiserver made no change of a type over a span
// of resourceVersions. A consistent read needs it for a quiet type: the
// type's cache moves only with the type's own events and with a bookmark
// about once a minute, while kube-apiserver's resourceVersion (etcd's
// revision) moves with every write to any type, so the cache of a type
// nobody writes trails it without lacking anything, and only
// kube-apiserver can say so. hub implements it with a short watch.
type Progress interface {
	// Progress watches resource from resourceVersion from until
	// kube-apiserver's first bookmark, and returns the bookmark's
	// resourceVersion (through) and the resourceVersion of the last
	// change sent before it, or from when none was: kube-apiserver made
	// no change of resource in (last, through].
	Progress(ctx context.Context, resource schema.GroupVersionResource, from uint64) (last, through uint64, err error)
}

// progressTimeout bounds one probe. kube-apiserver sends a watch's
// bookmark about 2 s before the watch's timeout, on its once-a-second
// bookmark tick (k8s.io/apiserver's cacher), so a probe asking for a 3 s
// watch hears it 1 to 2.25 s in; the rest is room for a loaded server.
const progressTimeout = 5 * time.Second

// progressRetryAfter is how long a type's probes rest after one failed,
// so that a kube-apiserver that refuses them at once is not asked again
// by every read that arrives meanwhile.
const progressRetryAfter = time.Second

// ProgressChecker runs Progress for every consistent read of a type that
// the cache has not shown current, one probe in flight per type whatever
// the number of reads waiting: the probe's answer serves every read whose
// version it covers, and a read it does not cover waits for the next.
//
// A probe's answer is a proof about the cache: from the moment the store
// holds the last change the probe was sent, it holds kube-apiserver's
// state at through, since nothing of the type changed between the two.
// The answer with the highest through is kept: later reads at or below it
// need no probe at all.
type ProgressChecker struct {
	source Progress

	mu     sync.Mutex
	byType map[*cache.Store]*progressState // guarded by mu
}

// progressState is one type's probes. Fields are guarded by
// ProgressChecker.mu.
type progressState struct {
	// last and through are the best proof so far: a store at last or
	// later holds kube-apiserver's state at through.
	last, through uint64
	// probing marks a probe in flight; ended is closed when it ends and
	// replaced by the next probe's.
	probing bool
	ended   chan struct{}
	// err is the last probe's error, failedAt when it came.
	err      error
	failedAt time.Time
}

// NewProgressChecker asks source.
func NewProgressChecker(source Progress) *ProgressChecker {
	return &ProgressChecker{source: source, byType: map[*cache.Store]*progressState{}}
}

// How confirm showed a state current.
const (
	// progressStore: the store reached the version by itself.
	progressStore = "store"
	// progressProbe: a probe showed the store current.
	progressProbe = "probe"
)

// confirm returns a state of s no older than kube-apiserver's state at
// rv, and how it was shown: the store reaching rv, or a probe covering
// it. It returns an error when ctx ends first, or when a probe it waited
// for failed (the caller then waits for the store alone).
func (c *ProgressChecker) confirm(ctx context.Context, s *cache.Store, rv uint64) (*cache.Snapshot, string, error) {
	for {
		snap := s.Snapshot()
		if snap.RV >= rv {
			return snap, progressStore, nil
		}
		c.mu.Lock()
		st, ok := c.byType[s]
		if !ok {
			st = &progressState{ended: make(chan struct{})}
			c.byType[s] = st
		}
		if st.through >= rv {
			last := st.last
			c.mu.Unlock()
			snap, err := s.Await(ctx, last)
			if err != nil {
				return nil, "", fmt.Errorf("wait for the cache of %s to reach %d: %w", s.Resource.Resource, last, err)
			}
			return snap, progressProbe, nil
		}
		if !st.probing {
			if st.err != nil && time.Since(st.failedAt) < progressRetryAfter {
				err := st.err
				c.mu.Unlock()
				return nil, "", err
			}
			st.probing = true
			go c.probe(s, st)
		}
		ended := st.ended
		c.mu.Unlock()

		select {
		case <-ended:
			c.mu.Lock()
			err := st.err
			c.mu.Unlock()
			if err != nil {
				return nil, "", err
			}
		case <-snap.Next():
		case <-ctx.Done():
			return nil, "", fmt.Errorf("wait for kube-apiserver's progress of %s: %w", s.Resource.Resource, ctx.Err())
		}
	}
}

// probe runs one probe of s from the store's current resourceVersion and
// publishes its answer.
func (c *ProgressChecker) probe(s *cache.Store, st *progressState) {
	from := s.Snapshot().RV
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), progressTimeout)
	last, through, err := c.source.Progress(ctx, s.Resource, from)
	cancel()
	observeProgressProbe(s.Resource.Resource, err, time.Since(start))
	if err == nil && last < from {
		err = fmt.Errorf("probe of %s from %d answered a last change at %d, before it began", s.Resource.Resource, from, last)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st.err = nil
	switch {
	case err != nil:
		st.err = fmt.Errorf("ask kube-apiserver for the progress of %s: %w", s.Resource.Resource, err)
		st.failedAt = time.Now()
	case through > st.through:
		st.last, st.through = last, through
	}
	st.probing = false
	close(st.ended)
	st.ended = make(chan struct{})
}
