package nodeview

import "time"

// Progress requests (v1alpha1.ProgressRequest): a view's client asks for
// a bookmark at or past everything the hub's cache held when the request
// came, and gets it once the view has taken that in, with the request's
// token in v1alpha1.NodeViewProgressAnnotation. The node endpoint needs
// it to answer a consistent read (resourceVersion "") from its copy:
// once the copy has applied the batch that bookmark closes, it holds
// what the hub had when the read came.
//
//	connection's reader --requestProgress: the stores' versions now--> proveProgress: each type
//	      shown as fresh as kube-apiserver now (bulk's consistent reads), or no answer --> Views.asked (an inbox)
//	Step: takeAskedLocked --> view.progress (mu) ... markLocked: the view's position
//	      reaches a request's versions --> BOOKMARK {bulk.k8s.io/progress: token}

// progressAsk is one progress request: its token, and each store's
// version when it came, which the view's position must reach before the
// request is answered.
type progressAsk struct {
	token string
	at    [numTypes]uint64
}

// askedProgress is a progress request on its way from the connection's
// reader to the next step.
type askedProgress struct {
	v   *view
	ask progressAsk
}

// requestProgress records a progress request of v's client and asks for
// a step. It runs on the connection's reader (watchmux.ProgressSink), so
// it hands the request over through an inbox, never taking mu: a step
// can be long (a view's initial state), and the reader must not wait
// for it. The stores' versions are read here, when the request comes:
// whatever a store publishes after it need not be in the answer,
// everything before it must be.
//
// With ProveFreshness, those versions are only where the answer starts:
// it waits until every type is shown as fresh as kube-apiserver when the
// request came (proveProgress), and is not given when one cannot be.
func (m *Views) requestProgress(v *view, token string) {
	start := time.Now()
	a := askedProgress{v: v, ask: progressAsk{token: token}}
	for i, s := range m.stores {
		a.ask.at[i] = s.Snapshot().RV
	}
	if m.fresh == nil || m.allHeard(v, start) {
		m.asked.put(a)
		m.poke()
		return
	}
	p := &pendingProgress{a: a}
	m.proving.add(p)
	go m.proveProgress(p, start)
}

// takeAskedLocked hands the requests that came since the last step to
// their views, in the order they came. A request of a view that has
// closed is dropped; one of a view that has not joined yet (its initial
// state or its resume is still to come) waits on it, and is answered
// after the join.
func (m *Views) takeAskedLocked() {
	for _, a := range m.asked.take() {
		if a.v.dead {
			progressRequests.WithLabelValues(progressClosed).Inc()
			continue
		}
		a.v.progress = append(a.v.progress, a.ask)
	}
}

// answerable returns the token of the latest progress request that the
// view at pos answers, and how many requests, that one and every one
// before it, the bookmark answers: the requests of a view are answered
// in the order they came, so one bookmark with the latest token answers
// them all. n is 0 when none is answered yet: the view's position has
// not reached their versions (a pod change held back, see
// Views.holdLocked, keeps the pods' short of them), or the view has not
// joined.
func (v *view) answerable(pos Position) (token string, n int) {
	if !v.joined {
		return "", 0
	}
	for n < len(v.progress) && covers(pos, v.progress[n].at) {
		n++
	}
	if n == 0 {
		return "", 0
	}
	return v.progress[n-1].token, n
}

// answered forgets the first n requests, which a bookmark just answered.
func (v *view) answered(n int) {
	progressRequests.WithLabelValues(progressAnswered).Inc()
	progressRequests.WithLabelValues(progressCovered).Add(float64(n - 1))
	clear(v.progress[:n])
	v.progress = v.progress[n:]
	if len(v.progress) == 0 {
		v.progress = nil // drop the array: most views ask rarely
	}
}

// abandonProgress counts the requests a closing view leaves unanswered.
func (v *view) abandonProgress() {
	if len(v.progress) > 0 {
		progressRequests.WithLabelValues(progressClosed).Add(float64(len(v.progress)))
		v.progress = nil
	}
}

// allHeard reports whether every store v's view carries has a working
// watch that heard from kube-apiserver lately (Views.heard): then the
// request is answered at the stores' versions, as they are when it came.
func (m *Views) allHeard(v *view, now time.Time) bool {
	for i, s := range m.stores {
		if v.types.Has(i) && !m.heard(s, now) {
			return false
		}
	}
	return true
}
