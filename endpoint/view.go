package endpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/nodecopy"
	"github.com/nodeproxy/nodeproxy/nodecopy/disk"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// viewFollower keeps the endpoint's copy of its node's view current: the
// node view channel (docs/api.md, "The node view") on the hub session,
// its batches applied to the copy whole, resumed from the copy's
// position across hub replicas, and opened afresh when the hub cannot
// resume it (410).
//
// The copy is live while the channel is open on a connection that is up
// and has applied a batch since it opened (the resume's, or the initial
// state's, bookmark): it then holds what the hub sent last, which the hub
// sends as soon as its cache has it. Before that first batch the copy is
// what it was, however old (a copy loaded from disk, one from before an
// outage). When it stops being live, lost says since when, on the
// monotonic clock: a wall clock set back or forward changes nothing.
type viewFollower struct {
	hub  *Hub
	copy *nodecopy.Copy
	// store persists the copy (nil: not persisted), as the copy of
	// cluster.
	store   *disk.Store
	cluster string

	mu      sync.Mutex
	channel *watchmux.SessionChannel // guarded by mu; nil while none is open
	// following: the channel has applied a batch since it opened.
	following bool // guarded by mu
	// lost is when the copy stopped being live; zero while live or
	// before it first was. offline is when the node was last seen
	// offline: a copy's staleness counts from the later of the two,
	// since an outage is no time the copy could have followed anything.
	lost, offline time.Time // guarded by mu
	// unproven: the copy was loaded from an earlier boot without a
	// proof of its age (restore), and has not followed the hub since;
	// it is not served offline.
	unproven bool // guarded by mu
	// fresh: open the view without a position, its initial state
	// replacing the copy (the hub could not resume it). Run's alone.
	fresh bool
	// upSince is when the hub connection last came up, zero once the
	// copy has applied a batch since: the copy is catching up.
	upSince time.Time // guarded by mu
	// caughtUp is closed, and replaced, when the copy applies its first
	// batch after the connection came up.
	caughtUp chan struct{} // guarded by mu
	// olderHub: the hub refused the newest version of the view (a
	// replica from before it); the view is opened at the first version
	// until the connection comes up again, perhaps on a newer replica.
	olderHub bool // guarded by mu

	// Progress requests (sync): tokens count up; one request is in
	// flight at a time (sending), and the reads that arrive meanwhile
	// share the next one (queued, 0 if none).
	progressMu sync.Mutex
	lastToken  uint64 // guarded by progressMu
	sending    bool   // guarded by progressMu
	queued     uint64 // guarded by progressMu

	trust trust

	// inJSON: the view is asked for in JSON, as an endpoint of an
	// earlier release asks for it; set by tests that compare the copies
	// of the two encodings before run.
	inJSON bool
}

// viewRetry paces the opening of the view after a failure: a hub without
// node views (an older replica) costs a request every 30 s.
var viewRetry = struct{ min, max time.Duration }{time.Second, 30 * time.Second}

func newViewFollower(hub *Hub, node string) *viewFollower {
	return &viewFollower{hub: hub, copy: nodecopy.New(node), caughtUp: make(chan struct{})}
}

// connected is told that the hub connection is up again: the copy
// catches up at its next batch (the view's resume, or its reopening,
// ends with a bookmark). It returns a channel closed then.
func (f *viewFollower) connected() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.upSince = time.Now()
	f.olderHub = false
	return f.caughtUp
}

// catchingUp reports whether the copy is catching up on a connection
// that came up less than hubRequestTimeout ago: its watches may wait for
// it rather than end.
func (f *viewFollower) catchingUp() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.upSince.IsZero() && time.Since(f.upSince) < hubRequestTimeout && f.hub.Connected()
}

// caughtUpSignal is a channel closed the next time the copy catches up
// after the connection came up.
func (f *viewFollower) caughtUpSignal() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.caughtUp
}

// run follows the view until ctx ends.
func (f *viewFollower) run(ctx context.Context) {
	wait := viewRetry.min
	for ctx.Err() == nil {
		up := f.hub.nextUp() // before the check: an up after it is seen
		s := f.hub.connected()
		if s == nil {
			select {
			case <-ctx.Done():
			case <-up:
			}
			continue
		}
		err := f.follow(ctx, s)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			wait = viewRetry.min
			continue
		}
		klog.ErrorS(err, "Node view from the hub; reads go on as without it", "retryIn", wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, viewRetry.max)
	}
}

// follow opens the view from the copy's position (its initial state if
// the copy holds none) and applies its batches until the channel ends.
// It returns nil when the channel ended in a way that calls for opening
// it again at once (the session gave up resuming it, or the hub could not
// resume from the copy's position: 410).
func (f *viewFollower) follow(ctx context.Context, s *watchmux.Session) error {
	resource := v1alpha1.NodeViewResourceV1alpha2
	f.mu.Lock()
	if f.olderHub {
		resource = v1alpha1.NodeViewResource
	}
	f.mu.Unlock()
	types, _ := v1alpha1.NodeViewTypesOf(resource.Version)
	pos, _ := f.copy.Position()
	if f.fresh || f.copy.Types() != types {
		// A copy of another version of the view (the endpoint's
		// previous release, an older hub) is replaced once, by the
		// view afresh, as after a 410.
		pos, f.fresh = "", false
	}
	op := v1alpha1.GetOperation{
		Resource: resource,
		Options: metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", f.copy.Node()).String(),
			ResourceVersion: pos,
		},
	}
	if pos == "" {
		op.Options.SendInitialEvents = ptr.To(true)
	}
	opened := mono()
	openCtx, cancel := context.WithTimeout(ctx, hubRequestTimeout)
	// Protobuf: the hub passes the pods its cache keeps as protobuf
	// through as they are, and the copy serves them so to the kubelet
	// (docs/api.md, "The node view"). A hub that sends only JSON (a
	// release before it) is followed all the same.
	var opts []watchmux.WatchOption
	if !f.inJSON {
		opts = append(opts, watchmux.InProtobuf())
	}
	ch, err := s.WatchBatches(openCtx, op, opts...)
	cancel()
	if err != nil {
		if resource != v1alpha1.NodeViewResource && (apierrors.IsInvalid(err) || apierrors.IsNotFound(err) || apierrors.IsBadRequest(err)) {
			// A replica from before this version of the view answers
			// that it does not serve it.
			klog.InfoS("The hub does not serve this version of the node view; opening the first one", "version", resource.Version, "reason", err)
			viewReopens.WithLabelValues("older_hub").Inc()
			f.mu.Lock()
			f.olderHub = true
			f.mu.Unlock()
			return nil
		}
		if pos != "" && (apierrors.IsResourceExpired(err) || apierrors.IsGone(err)) {
			klog.InfoS("The hub cannot resume the node view from the copy's position; opening it afresh", "position", pos)
			viewReopens.WithLabelValues("expired").Inc()
			f.fresh = true
			return nil
		}
		return fmt.Errorf("open the node view: %w", err)
	}
	f.mu.Lock()
	f.channel = ch
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.channel, f.following = nil, false
		f.markLostLocked()
		f.mu.Unlock()
		closeChannel(ch)
	}()
	var batch nodecopy.Batch
	for {
		var ev watchmux.Event
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case ev, ok = <-ch.Events:
		}
		if !ok {
			// The session gave up carrying it to another replica
			// (hubResumeTimeout): open it again from the copy.
			klog.InfoS("Node view channel ended without a replica taking it back; opening it again from the copy's position")
			viewReopens.WithLabelValues("ended").Inc()
			return nil
		}
		switch ev.Type {
		case watch.Error:
			if ev.Status != nil && ev.Status.Code == http.StatusGone {
				klog.InfoS("The hub expired the node view; opening it afresh", "reason", ev.Status.Message)
				viewReopens.WithLabelValues("expired").Inc()
				f.fresh = true
				return nil
			}
			return fmt.Errorf("the node view ended: %v", ev.Status)
		case watch.Bookmark:
			if err := closeBatch(&batch, ev); err != nil {
				return err
			}
			refused, err := f.copy.Apply(batch)
			for _, r := range refused {
				viewRefused.Inc()
				klog.ErrorS(r, "Refused an object of the node view")
			}
			if errors.Is(err, nodecopy.ErrGoesBack) {
				// A replica that would take the copy back (one that
				// listed a quiet type before the copy's last change of
				// it, and has not had a bookmark since): the copy keeps
				// what it has, and resumes again from its position,
				// after run's pause, on this replica once its store
				// moves on or on another. Opening the view afresh would
				// send it whole for nothing, and replace nothing older.
				viewResumesRefused.Inc()
				held, _ := f.copy.Position()
				return fmt.Errorf("refused the node view's batch, resuming again from the copy's position %s: %w", held, err)
			}
			if errors.Is(err, nodecopy.ErrBehind) {
				// A view afresh from a replica behind the copy: opened
				// afresh again after run's pause, when the replica has
				// caught up or the Service picks another.
				viewReopens.WithLabelValues("behind").Inc()
				f.fresh = true
				return fmt.Errorf("refused the node view afresh, opening it again: %w", err)
			}
			if err != nil {
				viewReopens.WithLabelValues("invalid").Inc()
				f.fresh = true
				return fmt.Errorf("apply a batch of the node view, opening it afresh: %w", err)
			}
			viewBatches.Inc()
			f.trustSince(opened)
			f.mu.Lock()
			f.lost, f.following, f.unproven = time.Time{}, true, false
			if !f.upSince.IsZero() {
				f.upSince = time.Time{}
				close(f.caughtUp)
				f.caughtUp = make(chan struct{})
			}
			f.mu.Unlock()
			batch = nodecopy.Batch{}
		default:
			object := []byte(ev.Object)
			if ev.Protobuf != nil {
				object = ev.Protobuf
			}
			if object == nil {
				return errors.New("a node view event without an object")
			}
			batch.Events = append(batch.Events, nodecopy.Event{Type: ev.Type, Object: object})
		}
	}
}

// closeBatch reads the bookmark that closes b.
func closeBatch(b *nodecopy.Batch, ev watchmux.Event) error {
	if ev.Object == nil {
		// A hub sends its bookmarks as JSON on a protobuf channel too.
		return errors.New("the node view's bookmark is not JSON")
	}
	var m metav1.PartialObjectMetadata
	if err := json.Unmarshal(ev.Object, &m); err != nil {
		return fmt.Errorf("the node view's bookmark: %w", err)
	}
	b.Position = m.ResourceVersion
	b.Initial = m.Annotations[metav1.InitialEventsAnnotationKey] == "true"
	if t := m.Annotations[v1alpha1.NodeViewProgressAnnotation]; t != "" {
		n, err := strconv.ParseUint(t, 10, 64)
		if err != nil {
			return fmt.Errorf("the node view's progress token %q: %w", t, err)
		}
		b.Progress = n
	}
	return nil
}

func (f *viewFollower) markLostLocked() {
	if f.lost.IsZero() {
		f.lost = time.Now()
	}
}

// live reports whether the copy is current: its channel open on a
// connection that is up, and a batch applied since it opened.
func (f *viewFollower) live() bool {
	f.mu.Lock()
	following := f.channel != nil && f.following
	f.mu.Unlock()
	return following && f.hub.Connected()
}

// age is how long the copy has not been live: 0 while it is, and false
// if it never held a view.
func (f *viewFollower) age() (time.Duration, bool) {
	if _, whole := f.copy.Position(); !whole {
		return 0, false
	}
	if f.live() {
		return 0, true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.markLostLocked()
	return time.Since(f.lost), true
}

// offlineAge is how old the copy is as an offline node would serve it:
// since it last followed the hub, or, if later, since kube-apiserver
// last answered the kubelet's reads of the view, which the copy took in
// (observe.go); false if it holds no view.
func (f *viewFollower) offlineAge() (time.Duration, bool) {
	age, whole := f.age()
	if heard, ok := f.sinceHeard(); ok && whole {
		age = min(age, heard)
	}
	return age, whole
}

// Why an offline node would not serve its copy, the values of the
// refusals metric's "reason" label ("" when it would).
const (
	refusedNoView    = "no_view"   // it holds no whole view
	refusedTooOld    = "too_old"   // older than --offline-max-age
	refusedUnproven  = "unproven"  // from an earlier boot, its age unproven
	refusedUnvouched = "unvouched" // it may lack what the node was served
)

// servableOffline is how old the copy is, offline, and why it may not be
// served then ("" if it may).
func (f *viewFollower) servableOffline(maxAge time.Duration) (time.Duration, string) {
	age, whole := f.offlineAge()
	switch {
	case !whole:
		return 0, refusedNoView
	case age > maxAge:
		return age, refusedTooOld
	case f.ageUnproven():
		// A copy from an earlier boot that has not followed the hub
		// since: an age that cannot be proven is too old.
		return age, refusedUnproven
	case !f.vouched():
		return age, refusedUnvouched
	}
	return age, ""
}

func (f *viewFollower) ageUnproven() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.unproven
}

// reach waits up to d for the copy to hold type i at rv or later.
func (f *viewFollower) reach(ctx context.Context, i int, rv uint64, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return f.copy.Await(ctx, func() bool { return f.at(i) >= rv })
}

// at is the version the copy holds type i at.
func (f *viewFollower) at(i int) uint64 {
	at, _ := f.copy.At(i)
	return at
}

// sawOffline notes that the node is offline now.
func (f *viewFollower) sawOffline() {
	f.mu.Lock()
	f.offline = time.Now()
	f.mu.Unlock()
}

// staleFor is how long the copy has not followed the hub while the node
// was not offline: 0 while it follows, false if it holds no view.
func (f *viewFollower) staleFor() (time.Duration, bool) {
	age, whole := f.age()
	if !whole || age == 0 {
		return age, whole
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return min(age, time.Since(f.offline)), true
}

// offlineSinceLost reports whether the node was offline since the copy
// stopped following the hub: the hub is away because the control plane
// was, not on its own.
func (f *viewFollower) offlineSinceLost() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.offline.IsZero() && !f.lost.IsZero() && !f.offline.Before(f.lost)
}
