package nodeview

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/cache"
)

// Freshness shows a store as fresh as kube-apiserver: *bulk.Catalog is
// one, with the questions and probes its consistent reads share.
type Freshness interface {
	// FreshVersion returns a resourceVersion V of s's type such that the
	// store, once at V, holds every change kube-apiserver had made of the
	// type when start came, or an error when that could not be shown
	// within budget of start.
	FreshVersion(ctx context.Context, s *cache.Store, start time.Time, budget time.Duration) (uint64, error)
}

// progressFreshBudget bounds the proof a progress request waits for. A
// quiet type needs a probe, whose bookmark comes 1 to 2.25 s in (bulk's
// consistent reads wait as long); the node endpoint waits 5 s for the
// answer (endpoint.syncTimeout) before it reads elsewhere, so a refusal
// within 4 s is one the endpoint has not yet given up on, and is counted
// here as what the endpoint saw.
const progressFreshBudget = 4 * time.Second

// ProveFreshness has progress requests answered only from stores whose
// watch of kube-apiserver is known to work, never at the versions of a
// store whose watch is stuck, cut off or refused: such a replica keeps
// its views, and would otherwise answer a node's consistent reads with
// its stale state for as long as that lasts.
//
// A store whose lists and watches succeed and which has heard from
// kube-apiserver (an event, a bookmark, which a working watch gets about
// every minute) within heardWithin is answered at its versions as they
// stand, milliseconds behind kube-apiserver, for nothing: the hub's
// consistency. Any other is shown as fresh as kube-apiserver when the
// request came by f, which asks kube-apiserver (a question of its
// resourceVersion, a probe for a quiet type); one that cannot be shown so
// within progressFreshBudget gets no answer, and the node endpoint,
// hearing none, reads elsewhere (the hub's channels, kube-apiserver).
// Asking kube-apiserver at every request instead cost it about fifty
// times the requests of an outage's return, every one of the nodes'
// consistent reads turning into questions and probes (docs/benchmarks.md,
// "The node view and an outage"). heardWithin 0 asks at every request.
//
// Call it before Run; without it (views stepped by hand in tests)
// requests are answered at the stores' versions.
func (m *Views) ProveFreshness(f Freshness, heardWithin time.Duration) {
	m.fresh, m.heardWithin = f, heardWithin
}

// heard reports whether s's watch works and has heard from kube-apiserver
// within m.heardWithin at now.
func (m *Views) heard(s *cache.Store, now time.Time) bool {
	return s.HeardWithin(now, m.heardWithin)
}

// proving holds the progress requests whose freshness is being shown, in
// the order they came: each is handed to the step only once every
// request before it is done, so that a view's requests stay answered in
// the order they came (a bookmark's token answers every earlier one).
type proving struct {
	mu    sync.Mutex
	queue []*pendingProgress // guarded by mu
}

// pendingProgress is a request being shown fresh.
type pendingProgress struct {
	a       askedProgress
	done    bool // guarded by proving.mu
	refused bool // guarded by proving.mu
}

// Reasons a progress request was refused (nodeproxy_nodeview_progress_refusals_total).
const (
	// refusedStale: the store did not reach kube-apiserver's version, nor
	// did a probe show it current, within progressFreshBudget: its watch
	// is behind or stuck.
	refusedStale = "stale"
	// refusedUnavailable: kube-apiserver could not be asked its version.
	refusedUnavailable = "unavailable"
	// refusedUnsynced: the type's first list is not in the cache.
	refusedUnsynced = "unsynced"
)

// proveProgress shows every type p's view carries as fresh as
// kube-apiserver at start, each at once, and hands p to the step if all
// were, in the order requests came.
func (m *Views) proveProgress(p *pendingProgress, start time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(progressFreshBudget))
	defer cancel()
	var errs [numTypes]error
	var wg sync.WaitGroup
	for i, s := range m.stores {
		if !p.a.v.types.Has(i) || m.heard(s, start) {
			continue // the consumer reads none of it, or its watch works
		}
		progressProofs.WithLabelValues(types[i].gvr.Resource).Inc()
		wg.Go(func() {
			rv, err := m.fresh.FreshVersion(ctx, s, start, progressFreshBudget)
			p.a.ask.at[i], errs[i] = max(p.a.ask.at[i], rv), err
		})
	}
	wg.Wait()
	refused := false
	for i, err := range errs {
		if err == nil {
			continue
		}
		refused = true
		reason := refusedStale
		switch {
		case !m.stores[i].HasSynced():
			reason = refusedUnsynced
		case apierrors.IsServerTimeout(err):
			reason = refusedUnavailable
		}
		resource := types[i].gvr.Resource
		progressRefusals.WithLabelValues(resource, reason).Inc()
		klog.V(2).InfoS("Refused a node view's progress request: the cache was not shown as fresh as kube-apiserver",
			"node", p.a.v.node, "resource", resource, "reason", reason, "err", err)
	}
	if refused {
		progressRequests.WithLabelValues(progressRefused).Inc()
	}
	for _, a := range m.proving.finish(p, refused) {
		m.asked.put(a)
	}
	m.poke()
}

// add queues p behind the requests being shown fresh.
func (q *proving) add(p *pendingProgress) {
	q.mu.Lock()
	q.queue = append(q.queue, p)
	q.mu.Unlock()
}

// finish records how p ended and returns the requests now free to go to
// the step: those at the head of the queue that are done and not
// refused, in order.
func (q *proving) finish(p *pendingProgress, refused bool) []askedProgress {
	q.mu.Lock()
	defer q.mu.Unlock()
	p.done, p.refused = true, refused
	var out []askedProgress
	n := 0
	for n < len(q.queue) && q.queue[n].done {
		if !q.queue[n].refused {
			out = append(out, q.queue[n].a)
		}
		n++
	}
	clear(q.queue[:n])
	q.queue = q.queue[n:]
	if len(q.queue) == 0 {
		q.queue = nil
	}
	return out
}
