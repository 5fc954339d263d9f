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

// latestVersionTimeout bounds one question to kube-apiserver. kube-apiserver
// answers a consistent list from its watch cache once the cache has caught
// up with etcd, waiting up to 3 s for it (k8s.io/apiserver's cacher), then
// reads etcd: a question that gives up at 3 s loses exactly the answers a
// loaded kube-apiserver gives late. Waiters bounded more tightly (a
// resume, freshnessTimeout) stop waiting at their own deadline.
const latestVersionTimeout = 5 * time.Second

// latestSpacing and latestMaxInFlight pipeline a type's questions. A
// loaded kube-apiserver takes seconds over a consistent list (it waits for
// its watch cache to hear etcd's progress), and a waiter needs a question
// sent after it arrived: with one question at a time, a waiter arriving
// just after one was sent waits for it and then for the whole next one.
// Sending the next question 200 ms after the last, whether or not that one
// has come back, cuts the wait to one question and at most 200 ms, for at
// most five questions a second per type while waiters keep coming. Eight
// in flight bounds what a stuck kube-apiserver holds; beyond that the
// next question waits for one to end.
const (
	latestSpacing     = 200 * time.Millisecond
	latestMaxInFlight = 8
)

// LatestChecker asks LatestVersions on behalf of many waiters, pipelined
// per type (latestSpacing): a hub replica that clients move to after
// another replica went away may see thousands of channels resume at once,
// and a kubelet's start reads hundreds of objects consistently; each must
// cost kube-apiserver a handful of requests, not one per read.
//
// A waiter may only trust an answer to a question sent after it arrived:
// its resourceVersion was handed out before it arrived, so such an answer
// is at least that version when the version is real, while an answer to
// a question already sent may predate it. Waiters therefore join the
// type's next question, not yet sent, which every waiter arriving before
// it is sent shares. An answer also stays known: a version at or below
// the highest answer seen needs no question at all (a resume's shortcut;
// a consistent read always waits for a question of its own).
type LatestChecker struct {
	source LatestVersions
	// spacing is latestSpacing; tests set their own.
	spacing time.Duration

	mu     sync.Mutex
	byType map[schema.GroupVersionResource]*latestState // guarded by mu
}

// latestState is one type's questions. Fields are guarded by
// LatestChecker.mu.
type latestState struct {
	known uint64 // the highest answer so far
	// next is the question waiters join, not sent yet; nil when none
	// waits. It is sent latestSpacing after lastSent, or when a question
	// ends if latestMaxInFlight are out.
	next     *latestCall
	lastSent time.Time
	inFlight int
}

// latestCall is one question to kube-apiserver and, once done is closed,
// its answer.
type latestCall struct {
	done      chan struct{}
	waiters   int  // guarded by LatestChecker.mu
	scheduled bool // a timer will send it; guarded by LatestChecker.mu
	rv        uint64
	err       error
}

func NewLatestChecker(source LatestVersions) *LatestChecker {
	return &LatestChecker{source: source, spacing: latestSpacing, byType: map[schema.GroupVersionResource]*latestState{}}
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
// began: the type's next question, which it joins or starts.
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
	call := st.next
	if call == nil {
		call = &latestCall{done: make(chan struct{})}
		st.next = call
		c.scheduleLocked(resource, st)
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

// scheduleLocked sends st.next now, or arms a timer to send it when
// latestSpacing has passed since the last question; with
// latestMaxInFlight questions out it waits for one to end (ask sends it
// then).
func (c *LatestChecker) scheduleLocked(resource schema.GroupVersionResource, st *latestState) {
	call := st.next
	if call == nil || call.scheduled || st.inFlight >= latestMaxInFlight {
		return
	}
	if wait := c.spacing - time.Since(st.lastSent); wait > 0 {
		call.scheduled = true
		time.AfterFunc(wait, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			call.scheduled = false
			if st.next == call {
				c.scheduleLocked(resource, st)
			}
		})
		return
	}
	st.next = nil
	st.lastSent = time.Now()
	st.inFlight++
	go c.send(resource, st, call)
}

// send asks kube-apiserver call's question and publishes its answer.
func (c *LatestChecker) send(resource schema.GroupVersionResource, st *latestState, call *latestCall) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), latestVersionTimeout)
	call.rv, call.err = c.source.LatestVersion(ctx, resource)
	cancel()
	observeLatestVersionRequest(resource.Resource, call.err, time.Since(start))
	if call.err != nil {
		call.err = fmt.Errorf("ask kube-apiserver for the resourceVersion of %s: %w", resource.Resource, call.err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if call.err == nil && call.rv > st.known {
		st.known = call.rv
	}
	close(call.done)
	st.inFlight--
	c.scheduleLocked(resource, st)
}
