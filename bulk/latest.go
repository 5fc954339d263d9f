package bulk

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// LatestVersions tells which resourceVersion kube-apiserver has reached
// for a type: the hub asks it the version a consistent read (resourceVersion
// "") must be no older than, and whether a resourceVersion a client
// resumes from, newer than the hub's cache, is one kube-apiserver has
// handed out. hub implements it with a consistent metadata-only list of
// one item.
type LatestVersions interface {
	// LatestVersion returns a resourceVersion of resource that
	// kube-apiserver had reached at some moment after the call began.
	LatestVersion(ctx context.Context, resource schema.GroupVersionResource) (uint64, error)
}

// latestVersionTimeout bounds one question to kube-apiserver. Its answer
// serves waiters bounded by freshnessTimeout, so a later answer would
// come too late for every one of them.
const latestVersionTimeout = freshnessTimeout

// LatestChecker asks LatestVersions on behalf of many waiters, with at
// most one question in flight per type and at most one more queued: a
// hub replica that clients move to after another replica went away may
// see thousands of channels resume at once, and must cost kube-apiserver
// a handful of requests, not one per channel.
//
// A waiter may only trust an answer to a question asked after it
// arrived: its resourceVersion was handed out before it arrived, so such
// an answer is at least that version when the version is real, while an
// answer to a question already in flight may predate it. A waiter that
// finds a question in flight therefore joins the queued one, which starts
// when the one in flight ends, and which every later waiter shares too.
// An answer also stays known: a version at or below the highest answer
// seen needs no question at all.
type LatestChecker struct {
	source LatestVersions

	mu     sync.Mutex
	byType map[schema.GroupVersionResource]*latestState // guarded by mu
}

// latestState is one type's questions.
type latestState struct {
	known            uint64      // the highest answer so far
	running, waiting *latestCall // in flight; queued behind it
}

// latestCall is one question to kube-apiserver and, once done is closed,
// its answer.
type latestCall struct {
	done    chan struct{}
	waiters int // guarded by LatestChecker.mu
	rv      uint64
	err     error
}

func NewLatestChecker(source LatestVersions) *LatestChecker {
	return &LatestChecker{source: source, byType: map[schema.GroupVersionResource]*latestState{}}
}

// reached reports whether kube-apiserver has reached rv for resource,
// from an earlier answer or from the answer to a question asked after
// this call began. An error means kube-apiserver could not say.
func (c *LatestChecker) reached(ctx context.Context, resource schema.GroupVersionResource, rv uint64) (bool, error) {
	latest, err := c.ask(ctx, resource, rv)
	if err != nil {
		return false, err
	}
	return latest >= rv, nil
}

// current is a resourceVersion of resource that kube-apiserver had
// reached at some moment after this call began: the answer to a question
// sent after it, never an earlier answer, which may predate changes the
// caller has already been shown elsewhere (a consistent read).
func (c *LatestChecker) current(ctx context.Context, resource schema.GroupVersionResource) (uint64, error) {
	return c.ask(ctx, resource, 0)
}

// ask returns the highest answer seen if it is at least atLeast (never,
// for atLeast 0), else the answer to a question sent after this call
// began: the one queued behind the question in flight, or a new one.
func (c *LatestChecker) ask(ctx context.Context, resource schema.GroupVersionResource, atLeast uint64) (uint64, error) {
	c.mu.Lock()
	st, ok := c.byType[resource]
	if !ok {
		st = &latestState{}
		c.byType[resource] = st
	}
	if atLeast > 0 && st.known >= atLeast {
		known := st.known
		c.mu.Unlock()
		return known, nil
	}
	var call *latestCall
	switch {
	case st.running == nil:
		call = &latestCall{done: make(chan struct{})}
		st.running = call
		go c.run(resource, st, call)
	case st.waiting == nil:
		call = &latestCall{done: make(chan struct{})}
		st.waiting = call
	default:
		call = st.waiting
	}
	call.waiters++
	c.mu.Unlock()
	select {
	case <-call.done:
	case <-ctx.Done():
		return 0, fmt.Errorf("waiting for kube-apiserver's resourceVersion of %s: %w", resource.Resource, ctx.Err())
	}
	return call.rv, call.err
}

// run asks call, then the question queued behind it, if any, until none
// is left.
func (c *LatestChecker) run(resource schema.GroupVersionResource, st *latestState, call *latestCall) {
	for call != nil {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), latestVersionTimeout)
		call.rv, call.err = c.source.LatestVersion(ctx, resource)
		cancel()
		observeLatestVersionRequest(resource.Resource, call.err, time.Since(start))
		if call.err != nil {
			call.err = fmt.Errorf("ask kube-apiserver for the resourceVersion of %s: %w", resource.Resource, call.err)
		}
		c.mu.Lock()
		if call.err == nil && call.rv > st.known {
			st.known = call.rv
		}
		close(call.done)
		call, st.waiting = st.waiting, nil
		st.running = call
		c.mu.Unlock()
	}
}
