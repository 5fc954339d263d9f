package nodeview

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/bulk"
)

// probeTimeout bounds one question to kube-apiserver: its bookmark comes
// 1 to 2.25 s into the 3 s watch hub's bulk.Progress opens, the rest is
// room for a loaded server (bulk's own bound for the same probe).
const probeTimeout = 5 * time.Second

// probeRetryAfter rests a type's probes after one failed, so that the
// resumes arriving meanwhile do not each ask a kube-apiserver that
// refuses; and after one that showed nothing past where it began
// (kube-apiserver's cache of the type had nothing newer to bookmark), so
// that the resumes that waited for it take that answer instead of each
// asking again at once.
const probeRetryAfter = time.Second

// spans extends a resume's position over versions this replica's change
// logs do not hold. A replica started after the serving one (a rolling
// update) listed each type at a version later than the position's At of
// a type that has not changed since; its log begins there, so it cannot
// read the state at At, though it is the same. kube-apiserver can say so:
// bulk.Progress watches the type from At to kube-apiserver's bookmark and
// reports the last change before it. With none, the consumer's state of
// the type holds up to the bookmark, and the view resumes from there.
//
// One probe per type at a time, whatever the number of views resuming
// (every node endpoint of a replica that went moves at once), and the
// best answer is kept: it serves every later resume it covers.
type spans struct {
	source bulk.Progress

	mu     sync.Mutex
	byType [numTypes]span // guarded by mu
}

// span is one type's best answer and its probe.
type span struct {
	// from, last, through: a probe from from saw its last change at last
	// (from itself when none) and no change in (last, through].
	from, last, through uint64
	probing             chan struct{} // closed when the probe in flight ends; nil when none
	// restedAt is when the last probe failed or showed nothing past its
	// start: none starts again within probeRetryAfter.
	restedAt time.Time
}

func newSpans(source bulk.Progress) *spans {
	if source == nil {
		return nil
	}
	return &spans{source: source}
}

// extend returns the latest version v such that type i did not change in
// (at, v]: at itself when kube-apiserver cannot show more.
func (p *spans) extend(ctx context.Context, i int, at uint64) uint64 {
	if p == nil || at == 0 {
		// 0 is no version (a store not listed yet): a probe from it would
		// be a watch from any version (bulk.ErrUnsynced).
		return at
	}
	for {
		p.mu.Lock()
		sp := &p.byType[i]
		switch {
		case sp.last <= at && at < sp.through:
			through := sp.through
			p.mu.Unlock()
			return through
		case sp.from <= at && at < sp.last:
			p.mu.Unlock()
			return at // the type changed at sp.last, after at
		case sp.probing != nil:
			probing := sp.probing
			p.mu.Unlock()
			select {
			case <-probing:
				continue
			case <-ctx.Done():
				return at
			}
		case time.Since(sp.restedAt) < probeRetryAfter:
			p.mu.Unlock()
			return at
		}
		probing := make(chan struct{})
		sp.probing = probing
		p.mu.Unlock()

		pctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		last, through, err := p.source.Progress(pctx, types[i].gvr, at)
		cancel()

		p.mu.Lock()
		switch {
		case err != nil:
			sp.restedAt = time.Now()
			klog.V(2).InfoS("Could not ask kube-apiserver whether a type changed since a node view's position", "resource", types[i].gvr.Resource, "resourceVersion", at, "err", err)
		case through <= at:
			sp.restedAt = time.Now()
		case through > sp.through:
			sp.from, sp.last, sp.through = at, last, through
		}
		sp.probing = nil
		close(probing)
		p.mu.Unlock()
		if err != nil || last != at || through <= at {
			return at
		}
		return through
	}
}
