package bulk

import (
	"context"
	"errors"
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
	// no change of resource in (last, through]. A watch that ends
	// without a bookmark (kube-apiserver had nothing past from to
	// bookmark when one was due) answers through = last: it shows
	// nothing new, and is no error.
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

// progressSpacing and progressMaxInFlight pipeline a type's probes while
// reads wait. kube-apiserver's cacher sends bookmarks only on its tick,
// about once a second, and only to watches due one; a probe is due a
// second after it opens. A read that arrives while a probe is open has
// its own version newer than that probe may cover, and would wait for
// the next probe, up to two ticks more. A new probe every 300 ms while
// reads wait keeps one due at every tick, so a read waits for the next
// tick, not the next probe: at most about 1.3 s, where the kubelet's
// secret and configmap managers wait 1 s for their reflector before the
// volume manager backs off (500 ms, doubling). Eight in flight is more
// than a tick's worth of spacing needs; it bounds what a stuck
// kube-apiserver holds.
const (
	progressSpacing     = 300 * time.Millisecond
	progressMaxInFlight = 8
)

// ProgressChecker runs Progress for every consistent read of a type that
// the cache has not shown current, pipelined (progressSpacing) whatever
// the number of reads waiting: a probe's answer serves every read whose
// version it covers, and a read it does not cover waits for a later one.
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
	// inFlight counts the probes open, lastStart is when the newest
	// began; ended is closed when any ends and replaced.
	inFlight  int
	lastStart time.Time
	ended     chan struct{}
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
	if !s.HasSynced() {
		return nil, "", fmt.Errorf("confirm %s at %d: %w", s.Resource.Resource, rv, ErrUnsynced)
	}
	spacing := time.NewTimer(0)
	defer spacing.Stop()
	for {
		snap := s.Snapshot()
		if snap.RV >= rv {
			return snap, progressStore, nil
		}
		c.mu.Lock()
		st := c.stateLocked(s)
		if st.through >= rv {
			last := st.last
			c.mu.Unlock()
			snap, err := s.Await(ctx, last)
			if err != nil {
				return nil, "", fmt.Errorf("wait for the cache of %s to reach %d: %w", s.Resource.Resource, last, err)
			}
			return snap, progressProbe, nil
		}
		if st.inFlight == 0 && st.err != nil && time.Since(st.failedAt) < progressRetryAfter {
			err := st.err
			c.mu.Unlock()
			return nil, "", err
		}
		c.startLocked(s, st)
		var next <-chan time.Time
		if st.inFlight < progressMaxInFlight {
			// Come back to start the next probe if none has ended by then
			// (a full spacing when one could not start: a failure's rest).
			d := progressSpacing - time.Since(st.lastStart)
			if d <= 0 {
				d = progressSpacing
			}
			spacing.Reset(d)
			next = spacing.C
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
		case <-next:
		case <-ctx.Done():
			return nil, "", fmt.Errorf("wait for kube-apiserver's progress of %s: %w", s.Resource.Resource, ctx.Err())
		}
	}
}

// prime starts a probe of s now if the pipeline allows one: a consistent
// read calls it when it arrives, so that the probe's second until its
// bookmark runs while the read asks kube-apiserver's version, rather than
// after. A probe that ends before the version comes back covers nothing
// newer than it and costs one watch.
func (c *ProgressChecker) prime(s *cache.Store) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.startLocked(s, c.stateLocked(s))
}

// stateLocked is s's probes, made on first use.
func (c *ProgressChecker) stateLocked(s *cache.Store) *progressState {
	st, ok := c.byType[s]
	if !ok {
		st = &progressState{ended: make(chan struct{})}
		c.byType[s] = st
	}
	return st
}

// startLocked starts a probe of s if none is open, or if the newest began
// progressSpacing ago and fewer than progressMaxInFlight are open, unless
// the last one failed within progressRetryAfter. It reports whether one
// started.
func (c *ProgressChecker) startLocked(s *cache.Store, st *progressState) bool {
	if !s.HasSynced() {
		return false // never a probe from "0": ErrUnsynced
	}
	if st.err != nil && time.Since(st.failedAt) < progressRetryAfter {
		return false
	}
	if st.inFlight > 0 && (st.inFlight >= progressMaxInFlight || time.Since(st.lastStart) < progressSpacing) {
		return false
	}
	st.inFlight++
	st.lastStart = time.Now()
	go c.probe(s, st)
	return true
}

// ErrUnsynced: a store whose first list is not in has no version to
// probe from. A probe from "0" would be kube-apiserver's watch from any
// version: synthetic ADDED events of its state in key order, not in
// resourceVersion order, so "no change between the last of them and the
// bookmark" is false of every object older than the last and newer than
// a list still on its way to the store.
var ErrUnsynced = errors.New("the type's first list is not in the cache yet")

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
	st.inFlight--
	close(st.ended)
	st.ended = make(chan struct{})
}
