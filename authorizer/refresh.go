package authorizer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Graph-lag denials, and how a replica avoids them.
//
// A node learns of a pod bound to it from kube-apiserver and at once
// reads what the pod references. The replica that answers the read learns
// of the pod through its own watch, a moment later or, under load, much
// later: kube-apiserver's in-tree Node authorizer refused 78,848 such
// reads in the 5,000-node scalability test, on apiservers whose graphs
// lagged. kube-apiserver then caches the refusal (unauthorizedTTL) and the
// kubelet backs off, so one lag costs a pod seconds to start.
//
// So before a replica refuses a node an object its graph does not connect
// to the node, it makes sure its graph has every pod of that node that
// kube-apiserver has: it lists the node's pods from kube-apiserver (a
// consistent read, metadata only, served from kube-apiserver's watch
// cache by its spec.nodeName index), waits until its own pods store has
// applied the newest of their resourceVersions, and decides again.
//
// Why the node's pods and not "the latest resourceVersion of the type": a
// store's resourceVersion moves only on its own type's events and on the
// bookmarks kube-apiserver sends about once a minute, so a replica
// waiting for kube-apiserver's current revision could wait a minute on a
// quiet cluster. The newest resourceVersion among the node's pods is the
// version of a pod event, which the replica's watch delivers as soon as
// it catches up. It also bounds the cost of a refusal by what the node
// has, about 110 pods' metadata at most, and keeps one node's refusals from
// waiting on another's.
//
// A node spamming forbidden reads cannot multiply that cost: each node has
// at most one list in flight, every refusal that arrives meanwhile waits
// for the next one (a list that started before a refusal arrived may not
// have seen the pod the node was just shown, so it cannot answer it), one
// list per node starts at most every RefreshOptions.MinInterval, and at
// most RefreshOptions.MaxConcurrent lists run at once across nodes. Allows
// never get here: they stay one graph lookup.

// Refresher brings a replica's view of one node's pods up to what
// kube-apiserver has. NodeAuthorizer asks it before refusing what a pod
// of the node might reference.
type Refresher interface {
	// Refresh returns nil once the graph holds every change to the pods
	// bound to node that kube-apiserver had when Refresh was called.
	Refresh(ctx context.Context, node string) error
}

// LatestPodVersion returns the highest resourceVersion among the pods
// bound to node, as kube-apiserver has them now (a consistent read); 0 if
// it has none.
type LatestPodVersion func(ctx context.Context, node string) (uint64, error)

// AwaitPods returns once the graph has applied every pod change up to rv.
type AwaitPods func(ctx context.Context, rv uint64) error

// RefreshOptions tune a NodeRefresher.
type RefreshOptions struct {
	// Timeout bounds one refresh: the list, the wait for the limit on
	// concurrent lists, and the wait for the pods store. Past it the
	// refusal stands, and kube-apiserver's webhook timeout (3 s in the
	// shipped AuthorizationConfiguration) is not reached.
	Timeout time.Duration
	// MinInterval is the least time between the starts of two lists for
	// the same node.
	MinInterval time.Duration
	// MaxConcurrent bounds the lists in flight across nodes.
	MaxConcurrent int
}

// DefaultRefreshOptions. A consistent list of one node's pods takes
// kube-apiserver up to about 200 ms on a quiet type (its watch cache
// waits for etcd to confirm its revision) and the pods store catches up
// within milliseconds on a healthy replica; the causal benchmark on a
// loaded two-core machine saw a refusal give up at the 1 s this bound
// first was (docs/benchmarks.md, "Graph-lag refusals"), so 2 s, which
// leaves a second of the webhook's three (manifests'
// AuthorizationConfiguration) for the network and the decision. 100 ms between lists holds a node spamming
// forbidden reads to ten lists a second, and costs a legitimate refusal
// at most that much more. 16 lists at once is many nodes' pods starting
// at the same moment on a replica that lags.
func DefaultRefreshOptions() RefreshOptions {
	return RefreshOptions{Timeout: 2 * time.Second, MinInterval: 100 * time.Millisecond, MaxConcurrent: 16}
}

// NodeRefresher is the Refresher of a hub replica: it coalesces refreshes
// per node as the comment above says.
type NodeRefresher struct {
	latest LatestPodVersion
	await  AwaitPods
	opts   RefreshOptions
	slots  chan struct{} // one per list in flight

	mu    sync.Mutex
	nodes map[string]*nodeRefreshes // guarded by mu
}

// nodeRefreshes is one node's queue: the round not started yet, which
// every refusal arriving now joins. A node is in the map while its
// goroutine runs.
type nodeRefreshes struct {
	pending *refreshRound // guarded by NodeRefresher.mu
}

type refreshRound struct {
	done chan struct{}
	err  error // written before done closes
}

var _ Refresher = (*NodeRefresher)(nil)

// NewNodeRefresher returns a refresher that learns a node's latest pod
// version with latest and waits for the graph with await.
func NewNodeRefresher(latest LatestPodVersion, await AwaitPods, opts RefreshOptions) (*NodeRefresher, error) {
	if opts.Timeout <= 0 || opts.MinInterval < 0 || opts.MaxConcurrent <= 0 {
		return nil, fmt.Errorf("refresh options: timeout %v and concurrency %d must be positive, interval %v not negative",
			opts.Timeout, opts.MaxConcurrent, opts.MinInterval)
	}
	return &NodeRefresher{latest: latest, await: await, opts: opts,
		slots: make(chan struct{}, opts.MaxConcurrent), nodes: map[string]*nodeRefreshes{}}, nil
}

// Refresh implements Refresher: it joins the node's next round, starting
// one if the node has none, and waits for it, for ctx, or for Timeout,
// whichever ends first. A round may start only once the one in flight has
// ended, so without its own bound a refusal could wait for two: longer
// than kube-apiserver waits for the webhook, which then refuses anyway.
func (r *NodeRefresher) Refresh(ctx context.Context, node string) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	r.mu.Lock()
	q, running := r.nodes[node]
	if !running {
		q = &nodeRefreshes{}
		r.nodes[node] = q
	}
	if q.pending == nil {
		q.pending = &refreshRound{done: make(chan struct{})}
	}
	round := q.pending
	r.mu.Unlock()
	if !running {
		go r.run(node, q)
	}
	select {
	case <-round.done:
		return round.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run refreshes node until nobody waits for another round.
func (r *NodeRefresher) run(node string, q *nodeRefreshes) {
	for {
		r.mu.Lock()
		round := q.pending
		if round == nil {
			delete(r.nodes, node)
			r.mu.Unlock()
			return
		}
		q.pending = nil // who arrives from now on waits for the next list
		r.mu.Unlock()

		start := time.Now()
		round.err = r.refresh(node)
		refreshRounds.WithLabelValues(roundResult(round.err)).Inc()
		close(round.done)
		if wait := r.opts.MinInterval - time.Since(start); wait > 0 {
			time.Sleep(wait)
		}
	}
}

// errTooManyRefreshes is a refresh that found every list slot taken for
// its whole timeout.
var errTooManyRefreshes = errors.New("too many refreshes in flight")

// refresh is one round: list the node's pods, wait for the graph. It is
// bounded by its own timeout rather than a caller's context: the round is
// shared, and one caller giving up must not fail the others.
func (r *NodeRefresher) refresh(node string) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.Timeout)
	defer cancel()
	select {
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		return errTooManyRefreshes
	}
	rv, err := r.latest(ctx, node)
	<-r.slots
	if err != nil {
		return fmt.Errorf("list the pods of node %q from kube-apiserver: %w", node, err)
	}
	if err := r.await(ctx, rv); err != nil {
		return fmt.Errorf("wait for the pods of node %q up to resourceVersion %d: %w", node, rv, err)
	}
	return nil
}

func roundResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, errTooManyRefreshes):
		return "throttled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "error"
}
