package watchmux

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

var errChannelClosed = errors.New("channel closed by its consumer")

// ErrNotConnected is SessionChannel.RequestProgress's error when the
// channel has no live connection to send the request on: the session is
// redialing, or the channel is being reopened.
var ErrNotConnected = errors.New("the channel has no live connection")

// refusedRetry is the pause before asking again after a 429 (the
// connection's opens in flight at the server's bound): long enough for a
// few of them to be answered.
const refusedRetry = 100 * time.Millisecond

// SessionChannel is one watch of a Session: its Events run on across
// connections. They end with an ERROR (403 access lost, 410 expired: list
// again and watch from the list's resourceVersion, ...), or without one
// when the consumer closed the channel, the session ended, or no
// connection took the channel back within WithResumeTimeout.
type SessionChannel struct {
	Events <-chan Event
	events chan Event

	s *Session
	// sel is the caller's selector; open what is sent first.
	sel, open v1alpha1.GetOperation
	// opts are the caller's, for every open of the channel.
	opts []WatchOption
	// The caller's wishes, which the session's own additions (bookmarks,
	// initial events for a resume point) must not show through.
	wantBookmarks, wantInitialEnd, wantInitial bool

	closing   chan struct{}
	closeOnce sync.Once

	mu   sync.Mutex
	cur  *Channel // guarded by mu
	conn *Client  // guarded by mu: cur's connection

	// Only the pump touches these.
	rv               string // the resume point: "" while unknown
	initial          bool   // the initial events are still coming
	initialDelivered int    // initial events handed to the consumer
	justResumed      bool
	// batched: see WatchBatches; pending is the batch held back until
	// its bookmark.
	batched bool
	pending []Event
}

// Watch opens a channel of the objects sel selects, as Client.Watch does,
// and keeps it open across connections. A refusal is an
// *apierrors.StatusError.
//
// The channel is opened with allowWatchBookmarks, so that a quiet channel
// still learns a recent resourceVersion to resume from, and, when sel
// starts from "now" (no resourceVersion), with sendInitialEvents, whose
// closing bookmark is the first resume point; the consumer sees bookmarks
// and initial events only if sel asked for them.
func (s *Session) Watch(ctx context.Context, sel v1alpha1.GetOperation, opts ...WatchOption) (*SessionChannel, error) {
	return s.watch(ctx, sel, false, opts)
}

// WatchBatches is Watch for a channel whose events come in batches, each
// closed by a BOOKMARK whose resourceVersion is the channel's position
// after it (a node view, docs/api.md "The node view": its events carry
// objects of many types, whose own resourceVersions are no resume
// point). The consumer gets a batch, then its bookmark, only once the
// bookmark has arrived, and every bookmark whatever sel asked; the
// channel resumes from the last bookmark alone. A connection lost in the
// middle of a batch then loses and repeats nothing: the batch held back
// is dropped, and the replica the channel resumes on sends the change
// from that bookmark whole. The initial state is the first batch, so a
// connection lost during it reopens the channel as first asked.
func (s *Session) WatchBatches(ctx context.Context, sel v1alpha1.GetOperation, opts ...WatchOption) (*SessionChannel, error) {
	return s.watch(ctx, sel, true, opts)
}

func (s *Session) watch(ctx context.Context, sel v1alpha1.GetOperation, batched bool, watchOpts []WatchOption) (*SessionChannel, error) {
	events := make(chan Event, ClientEventBuffer+1)
	sc := &SessionChannel{Events: events, events: events, s: s, sel: sel, opts: watchOpts, closing: make(chan struct{}), batched: batched}
	opts := sel.Options
	sc.wantBookmarks = opts.AllowWatchBookmarks
	sc.wantInitialEnd = opts.SendInitialEvents != nil && *opts.SendInitialEvents
	fromNow := opts.ResourceVersion == "" || opts.ResourceVersion == "0"
	sc.wantInitial = sc.wantInitialEnd || fromNow && opts.SendInitialEvents == nil
	sc.open = sel
	sc.open.Options.AllowWatchBookmarks = true
	if fromNow {
		// Changes only from "now" has no resume point until the first
		// event; the initial state's bookmark gives one at once, and
		// its objects are dropped.
		sc.open.Options.SendInitialEvents = ptr.To(true)
	}
	sc.initial = sc.open.Options.SendInitialEvents != nil && *sc.open.Options.SendInitialEvents
	if !sc.initial {
		sc.rv = opts.ResourceVersion
	}
	var old *Client
	for {
		c, err := s.connOtherThan(ctx, old, nil)
		if err != nil {
			return nil, err
		}
		ch, err := c.Watch(ctx, sc.open, sc.opts...)
		var status *apierrors.StatusError
		switch {
		case err == nil:
			sc.cur, sc.conn = ch, c
			s.pumps.Add(1)
			go sc.pump()
			return sc, nil
		case errors.As(err, &status), ctx.Err() != nil:
			return nil, err
		}
		old = c // the connection ended under the open: try the next
	}
}

// Close closes the channel; its Events close without an ERROR.
func (sc *SessionChannel) Close(ctx context.Context) error {
	sc.closeOnce.Do(func() { close(sc.closing) })
	sc.mu.Lock()
	ch, c := sc.cur, sc.conn
	sc.mu.Unlock()
	if c == nil {
		return nil
	}
	if err := c.CloseWatch(ctx, ch); err != nil && c.Err() == nil {
		return err
	}
	return nil
}

// RequestProgress asks the channel, on its current connection, for a
// bookmark that answers token (Client.RequestProgress), and waits for the
// server's response. A channel between connections (the session
// redialing, the channel being reopened) gets ErrNotConnected at once,
// not a retry: the answer would come from another replica, whose cache
// holds other changes than the one the caller meant, so the caller
// decides (asks again once the channel is back, or reads elsewhere). A
// refusal is an *apierrors.StatusError. The answer comes among Events:
// on a batched channel (WatchBatches) as the bookmark that closes a
// batch, like any other.
func (sc *SessionChannel) RequestProgress(ctx context.Context, token string) error {
	sc.mu.Lock()
	ch, c := sc.cur, sc.conn
	sc.mu.Unlock()
	if c == nil || c != sc.s.current() || c.Err() != nil {
		return fmt.Errorf("progress request on %s: %w", sc, ErrNotConnected)
	}
	if err := c.RequestProgress(ctx, ch.ID, token); err != nil {
		return fmt.Errorf("progress request on %s: %w", sc, err)
	}
	return nil
}

// end is how a channel's run on one connection ended.
type end int

const (
	endLost   end = iota // connection gone (closed, cut, or 503): resume
	endFinal             // an ERROR went to the consumer
	endClosed            // the consumer closed it, or the session ended
)

// pump carries the channel's events to the consumer, connection after
// connection.
func (sc *SessionChannel) pump() {
	defer sc.s.pumps.Done()
	defer close(sc.events)
	for {
		sc.mu.Lock()
		ch, c := sc.cur, sc.conn
		sc.mu.Unlock()
		switch sc.drain(ch, c) {
		case endFinal, endClosed:
			return
		}
		if !sc.reopen(c, time.Now()) {
			return
		}
	}
}

// drain forwards ch's events until it ends.
func (sc *SessionChannel) drain(ch *Channel, c *Client) end {
	for {
		var ev Event
		var ok bool
		select {
		case ev, ok = <-ch.Events:
		case <-sc.closing:
			return endClosed
		}
		if !ok {
			select {
			case <-sc.closing:
				return endClosed // Close closed it on the server
			default:
				return endLost // buffered events were read first
			}
		}
		resumed := sc.justResumed
		sc.justResumed = false
		if ev.Type == watch.Error {
			if ev.Status != nil && ev.Status.Code == http.StatusServiceUnavailable {
				sc.s.retire(c)
				return endLost
			}
			if resumed && ev.Status != nil && ev.Status.Code == http.StatusGone {
				clientResumesTotal.WithLabelValues(ResumeExpired).Inc()
			}
			sc.deliver(ev)
			return endFinal
		}
		if sc.batched {
			if !sc.noteBatch(ev) {
				continue
			}
			for _, held := range sc.pending {
				if !sc.deliver(held) {
					return endClosed
				}
			}
			clear(sc.pending)
			sc.pending = sc.pending[:0]
		}
		if (sc.batched || sc.note(ev)) && !sc.deliver(ev) {
			return endClosed
		}
	}
}

// noteBatch holds ev back until its batch's bookmark, whose
// resourceVersion becomes the resume point; true for the bookmark.
func (sc *SessionChannel) noteBatch(ev Event) bool {
	if ev.Type != watch.Bookmark {
		sc.pending = append(sc.pending, ev)
		return false
	}
	m, err := eventMeta(ev)
	if err != nil {
		klog.ErrorS(err, "Bulk watch bookmark without readable metadata")
		return true
	}
	sc.initial = false
	sc.rv = m.Metadata.ResourceVersion
	return true
}

// meta is what the session reads of an event's object.
type meta struct {
	Metadata struct {
		ResourceVersion string            `json:"resourceVersion"`
		Annotations     map[string]string `json:"annotations"`
	} `json:"metadata"`
}

// eventMeta reads ev's object's metadata, from whichever encoding it
// came in.
func eventMeta(ev Event) (meta, error) {
	if ev.Protobuf != nil {
		return protobufMeta(ev.Protobuf)
	}
	var m meta
	err := json.Unmarshal(ev.Object, &m)
	return m, err
}

// note takes in ev's resourceVersion and says whether the consumer is to
// see it.
func (sc *SessionChannel) note(ev Event) bool {
	m, err := eventMeta(ev)
	if err != nil {
		// Unreachable from a hub; pass it on untouched and keep the
		// resume point.
		klog.ErrorS(err, "Bulk watch event without readable metadata")
		return true
	}
	if ev.Type == watch.Bookmark {
		if sc.initial {
			if m.Metadata.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
				return false // not a resume point yet
			}
			sc.initial = false
			sc.rv = m.Metadata.ResourceVersion
			return sc.wantInitialEnd
		}
		sc.rv = m.Metadata.ResourceVersion
		// A bookmark that answers a progress request is the consumer's
		// own: it asked for it.
		_, answers := m.Metadata.Annotations[v1alpha1.NodeViewProgressAnnotation]
		return sc.wantBookmarks || answers
	}
	if sc.initial {
		// An object's version inside the initial state is no resume
		// point: the objects after it are still to come.
		if !sc.wantInitial {
			return false
		}
		sc.initialDelivered++
		return true
	}
	sc.rv = m.Metadata.ResourceVersion
	return true
}

// deliver hands ev to the consumer, waiting for room; false if the
// consumer closed the channel, or the session ended, meanwhile.
func (sc *SessionChannel) deliver(ev Event) bool {
	select {
	case sc.events <- ev:
		return true
	case <-sc.closing:
		return false
	case <-sc.s.ctx.Done():
		return false
	}
}

// reopen opens the channel again on a connection other than dead, from
// its resume point; false when the channel is over (an ERROR went to the
// consumer, or it was closed).
func (sc *SessionChannel) reopen(dead *Client, lost time.Time) bool {
	clear(sc.pending) // a batch without its bookmark: the next replica sends it again
	sc.pending = sc.pending[:0]
	sel := sc.open
	if !sc.initial {
		sel = sc.sel
		sel.Options.ResourceVersion = sc.rv
		sel.Options.ResourceVersionMatch = ""
		sel.Options.SendInitialEvents = nil
		sel.Options.AllowWatchBookmarks = true
	} else if sc.initialDelivered > 0 {
		// Half an initial state reached the consumer; its other half
		// may hold objects that changed or went since. No resume point
		// covers that: the consumer lists again.
		sc.observe(ResumeLostInitial, lost, "")
		sc.deliver(Event{Type: watch.Error, Status: &metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired,
			Message: "the connection to the hub was lost during the initial events; list again and watch from the list's resourceVersion",
		}})
		return false
	}
	rctx, stop := sc.resumeContext(lost)
	defer stop()
	old := dead
	for {
		c, err := sc.s.connOtherThan(rctx, old, sc.closing)
		if err != nil {
			sc.timedOut(rctx, lost, sel.Options.ResourceVersion)
			return false // closed, the session ended, or out of time
		}
		ctx, cancel := context.WithTimeout(rctx, reopenTimeout)
		ch, err := c.Watch(ctx, sel, sc.opts...)
		cancel()
		var status *apierrors.StatusError
		switch {
		case err == nil:
			sc.mu.Lock()
			sc.cur, sc.conn = ch, c
			sc.mu.Unlock()
			select {
			case <-sc.closing:
				// Closed while reopening: Close saw the old channel.
				closeCtx, cancel := context.WithTimeout(sc.s.ctx, reopenTimeout)
				_ = c.CloseWatch(closeCtx, ch)
				cancel()
				return false
			default:
			}
			sc.justResumed = true
			sc.observe(ResumeReopened, lost, sel.Options.ResourceVersion)
			return true
		case errors.As(err, &status) && status.ErrStatus.Code == http.StatusTooManyRequests:
			old = nil // the connection is fine: wait and ask again
			select {
			case <-time.After(refusedRetry):
			case <-sc.closing:
				return false
			case <-rctx.Done():
				sc.timedOut(rctx, lost, sel.Options.ResourceVersion)
				return false
			}
		case errors.As(err, &status):
			// The new replica refuses what the old one allowed (access
			// lost while away, ...): the consumer hears it as the
			// channel's end.
			sc.observe(ResumeRefused, lost, sel.Options.ResourceVersion)
			sc.deliver(Event{Type: watch.Error, Status: &status.ErrStatus})
			return false
		case rctx.Err() != nil:
			sc.timedOut(rctx, lost, sel.Options.ResourceVersion)
			return false
		case c.Err() != nil:
			old = c // died under the reopen: the next one
		default:
			// Timed out, or the send failed before the reader saw the
			// connection end: the next one if it is ending, else again.
			select {
			case <-c.Done():
				old = c
			case <-time.After(refusedRetry):
				old = nil
			}
		}
	}
}

// resumeContext is the life of one resume: the session's, bounded by
// WithResumeTimeout from lost.
func (sc *SessionChannel) resumeContext(lost time.Time) (context.Context, context.CancelFunc) {
	if d := sc.s.o.resumeTimeout; d > 0 {
		return context.WithDeadline(sc.s.ctx, lost.Add(d))
	}
	return context.WithCancel(sc.s.ctx)
}

// timedOut counts a resume that ran out of time; a resume ended by the
// consumer or the session is not one.
func (sc *SessionChannel) timedOut(rctx context.Context, lost time.Time, rv string) {
	if errors.Is(rctx.Err(), context.DeadlineExceeded) && sc.s.ctx.Err() == nil {
		select {
		case <-sc.closing:
		default:
			sc.observe(ResumeTimedOut, lost, rv)
		}
	}
}

func (sc *SessionChannel) observe(outcome string, lost time.Time, rv string) {
	clientResumesTotal.WithLabelValues(outcome).Inc()
	if sc.s.o.onResume != nil {
		sc.s.o.onResume(Resume{Channel: sc, Outcome: outcome, Lost: lost, Reopened: time.Now(), ResourceVersion: rv})
	}
}

// String names the channel in logs and errors: its selector.
func (sc *SessionChannel) String() string {
	return fmt.Sprintf("%s %s/%s", sc.sel.Resource.Resource, sc.sel.Namespace, sc.sel.Options.FieldSelector)
}
