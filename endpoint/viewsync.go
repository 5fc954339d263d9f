package endpoint

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// errNoProgress is a sync the hub did not answer in time, or could not be
// asked.
var errNoProgress = errors.New("the hub did not confirm the node view's progress")

// syncTimeout bounds a consistent read's wait for the hub's answer to a
// progress request; past it the read goes where it would without a copy.
// The hub answers only once it has shown every type of its cache as
// fresh as kube-apiserver when the request came, as its consistent bulk
// reads do: a busy type in milliseconds, a quiet one with a probe, whose
// bookmark comes 1 to 2.25 s in. It gives up after 4 s and then sends no
// answer at all (its cache is stale: docs/api.md, "Progress requests"),
// so 5 s waits for every answer it may give.
const syncTimeout = 5 * time.Second

// sync returns once the copy holds what the hub had when sync was
// called: a progress request on the view's channel, answered by a
// bookmark after the hub's next round, which takes in its cache as it
// was when the request arrived. Concurrent calls share requests: a call
// waits for the first request sent after it began.
func (f *viewFollower) sync(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	f.progressMu.Lock()
	var token uint64
	send := !f.sending
	if send {
		f.lastToken++
		token, f.sending = f.lastToken, true
	} else {
		// The request in flight was sent before this call: it does not
		// cover what the hub had at this call. The next one does.
		if f.queued == 0 {
			f.lastToken++
			f.queued = f.lastToken
		}
		token = f.queued
	}
	f.progressMu.Unlock()
	if send {
		go f.sendProgress(token)
	}
	if !f.copy.Await(ctx, func() bool { return f.copy.Progressed(token) }) {
		syncs.WithLabelValues("timeout").Inc()
		return errNoProgress
	}
	syncs.WithLabelValues("ok").Inc()
	return nil
}

// sendProgress sends the progress request token, waits for its answer (or
// syncTimeout), then sends the one queued meanwhile, if any: one request
// in flight at a time, shared by every read that arrived before it was
// sent.
func (f *viewFollower) sendProgress(token uint64) {
	for {
		f.mu.Lock()
		ch := f.channel
		f.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), syncTimeout)
		if ch != nil && ch.RequestProgress(ctx, strconv.FormatUint(token, 10)) == nil {
			progressRequests.Inc()
			f.copy.Await(ctx, func() bool { return f.copy.Progressed(token) })
		}
		cancel()
		f.progressMu.Lock()
		if f.queued == 0 {
			f.sending = false
			f.progressMu.Unlock()
			return
		}
		token, f.queued = f.queued, 0
		f.progressMu.Unlock()
	}
}
