package endpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/nodecopy"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// Modes in which the copy answers, the values of the copy reads metric's
// "mode" label.
const (
	modeLive    = "live"
	modeOffline = "offline"
)

// copyWaitForVersion is how long a read at a resourceVersion the copy
// has not reached waits for it, as kube-apiserver's watch cache waits 3 s
// for a version it has not reached before answering 504.
const copyWaitForVersion = 3 * time.Second

// copyBookmarkInterval is how often a quiet watch of the copy gets a
// bookmark, as kube-apiserver's watch cache sends one about every
// minute; through an outage too, so the kubelet's watches stay open.
const copyBookmarkInterval = time.Minute

// copyCheckInterval is how often a watch of the copy checks that the copy
// may still answer it: a copy that stopped following the hub while
// kube-apiserver answers is stale, and its watches end so that the
// kubelet watches kube-apiserver.
const copyCheckInterval = 5 * time.Second

// copyMode says whether the copy may answer now, and how: live while it
// follows the hub; offline while neither the hub nor kube-apiserver
// answers, for at most OfflineMaxAge; not at all otherwise.
func (e *Endpoint) copyMode() (string, bool) {
	if e.view == nil {
		return "", false
	}
	if e.view.live() {
		return modeLive, true
	}
	if !e.offline() {
		return "", false
	}
	e.view.sawOffline()
	if _, refused := e.view.servableOffline(e.offlineMaxAge); refused != "" {
		// Serving nothing is safe; serving the past, or a copy older
		// than the operator allows, is not.
		copyRefusals.WithLabelValues(refused).Inc()
		return "", false
	}
	return modeOffline, true
}

// serveFromCopy answers r from the copy, and returns false, having
// written nothing, when the copy may not answer it: the request then
// goes where it would without a copy.
func (e *Endpoint) serveFromCopy(w http.ResponseWriter, req *http.Request, r *copyRead) bool {
	mode, ok := e.copyMode()
	if !ok || r.onlyOffline && mode != modeOffline {
		return false
	}
	if _, carried := e.view.copy.At(r.typ); !carried {
		return false // a view from an older hub, without the type
	}
	if served, err := e.copyAt(req.Context(), r, mode); err != nil {
		e.noteCopyRead(r, mode)
		writeError(w, req, err)
		return true
	} else if !served {
		return false
	}
	if r.verb == "watch" {
		return e.serveCopyWatch(w, req, r, mode)
	}
	return e.serveCopyRead(w, req, r, mode)
}

// serveCopyRead answers a get or a list from the copy; false, having
// written nothing, when the copy does not hold the answer. A function
// of its own so that serveFromCopy's frame, under every watch of the
// copy while it waits, holds nothing of a list's.
func (e *Endpoint) serveCopyRead(w http.ResponseWriter, req *http.Request, r *copyRead, mode string) bool {
	if !e.copyHolds(r, mode) {
		return false
	}
	list, rv, err := e.view.copy.List(r.typ, r.filter)
	if err != nil {
		return false
	}
	if r.opts.Limit > 0 && int64(len(list)) > r.opts.Limit && mode == modeLive || r.opts.Continue != "" {
		return false // pages: kube-apiserver's to cut
	}
	e.noteCopyRead(r, mode)
	gv := r.groupVersion()
	if r.verb == "get" {
		if len(list) == 0 {
			writeError(w, req, apierrors.NewNotFound(schema.GroupResource{Group: gv.Group, Resource: r.viewType().Resource}, r.filter.Name))
			return true
		}
		writeCopyObject(w, req, list[0], gv)
		return true
	}
	writeCopyList(w, req, gv.WithKind(r.viewType().Kind+"List"), list, rv)
	return true
}

// copyHolds reports whether the copy holds the answer to r: anything but
// an object of a partial read that the copy lacks while the hub or
// kube-apiserver can say whether it exists and the node may read it.
// Offline, the copy's word is the only one: it lacks the object.
func (e *Endpoint) copyHolds(r *copyRead, mode string) bool {
	if !r.partial || mode != modeLive {
		return true
	}
	o, _, err := e.view.copy.Get(r.typ, r.filter.Namespace, r.filter.Name)
	return err == nil && o != nil
}

func (e *Endpoint) noteCopyRead(r *copyRead, mode string) {
	requests.WithLabelValues(pathCopy, r.viewType().Resource, r.verb).Inc()
	copyReads.WithLabelValues(mode).Inc()
}

// listOf is the typed list of kind gvk holding objs, at rv.
func listOf(gvk schema.GroupVersionKind, objs []*nodecopy.Object, rv uint64) (runtime.Object, error) {
	list, err := scheme.New(gvk)
	if err != nil {
		return nil, fmt.Errorf("a list of the copy's %s: %w", gvk.Kind, err)
	}
	items := make([]runtime.Object, 0, len(objs))
	for _, o := range objs {
		obj, err := runtime.Decode(deserializer, o.Raw)
		if err != nil {
			return nil, fmt.Errorf("decode the copy's %s %s/%s: %w", gvk.Kind, o.Namespace, o.Name, err)
		}
		items = append(items, obj)
	}
	if err := meta.SetList(list, items); err != nil {
		return nil, err
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, err
	}
	lm.SetResourceVersion(strconv.FormatUint(rv, 10))
	list.GetObjectKind().SetGroupVersionKind(gvk)
	return list, nil
}

// copyAt decides whether the copy holds what r asks at the version it
// asks, as kube-apiserver's watch cache decides:
//
//   - "" (the latest): live, once the copy holds what the hub had when
//     r came (a progress request of the view); offline, the copy as it
//     is (docs/api.md, "Reads from the node's copy");
//   - "0" (any): the copy as it is;
//   - a version: once the copy reaches it, waiting up to 3 s. Live, a
//     version still out of reach goes to the hub or kube-apiserver, which
//     gave it; offline it is 504, on which the kubelet lists again at "".
//
// An error is the answer to give; false without one, the read is not
// the copy's.
func (e *Endpoint) copyAt(ctx context.Context, r *copyRead, mode string) (bool, error) {
	rv := r.opts.ResourceVersion
	switch {
	case rv == "":
		if mode != modeLive || e.view.sync(ctx) == nil {
			return true, nil
		}
		if e.ready.apiServerReady() != nil {
			// The hub could not show its cache current (it cannot reach
			// kube-apiserver either: a control-plane outage with the
			// hub up), and kube-apiserver does not answer the node:
			// nobody can say what is newer than the copy, which holds
			// everything the node was served. As offline.
			syncs.WithLabelValues("unconfirmed").Inc()
			return true, nil
		}
		return false, nil
	case rv == "0":
		return true, nil
	case r.opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact:
		return false, nil
	}
	want, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return false, nil // kube-apiserver words the 400
	}
	if at := e.view.at(r.typ); at >= want {
		return true, nil
	}
	// A version from the hub's cache (a read the copy did not answer)
	// is usually past the copy's only because the node's view has not
	// changed since: the view's bookmarks come a minute apart then. A
	// progress request brings the copy to the hub's position at once.
	if mode == modeLive && e.view.sync(ctx) == nil && e.view.at(r.typ) >= want {
		return true, nil
	}
	if e.view.reach(ctx, r.typ, want, copyWaitForVersion) {
		return true, nil
	}
	if mode == modeLive || ctx.Err() != nil {
		return false, nil
	}
	return false, apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", want, e.view.at(r.typ)), 1)
}

// serveCopyWatch streams a watch of the copy as kube-apiserver streams
// one: its initial events if asked, then every change from its version,
// bookmarks about every minute, and its end at timeoutSeconds, when the
// copy may no longer answer, or, for a watch of one object, when the
// object leaves the node's view.
//
// A watch spends its life waiting in followCopyWatch, under this frame
// and its callers': opening it and its initial events are
// openCopyWatch's and startCopyWatch's, which return before the wait,
// so that the waiting goroutine's frames stay small enough for the
// runtime to halve its stack at a collection (it does when less than a
// quarter is in use; docs/benchmarks.md, "The node endpoint's
// footprint").
func (e *Endpoint) serveCopyWatch(w http.ResponseWriter, req *http.Request, r *copyRead, mode string) bool {
	cw := e.openCopyWatch(w, req, r, mode)
	if cw == nil {
		return false
	}
	gauge := watches.WithLabelValues(pathCopy, r.viewType().Resource)
	gauge.Inc()
	defer gauge.Dec()
	if cw.startCopyWatch() {
		e.followCopyWatch(req.Context(), cw)
	}
	return true
}

// copyWatch is a watch of the copy being served.
type copyWatch struct {
	r      *copyRead
	stream *watchStream
	wt     *nodecopy.Watch // nil: expired, offline
	// initial are the objects a watch with its initial state starts
	// with, at at.
	initial  []*nodecopy.Object
	at       uint64
	deadline time.Time // timeoutSeconds, or the endpoint's own
	lastSent time.Time
}

// openCopyWatch opens the watch of the copy that r asks; nil, having
// written nothing, when the copy does not answer it.
func (e *Endpoint) openCopyWatch(w http.ResponseWriter, req *http.Request, r *copyRead, mode string) *copyWatch {
	stream, ok := newWatchStream(w, req, r.groupVersion())
	if !ok {
		return nil
	}
	if !e.copyHolds(r, mode) {
		return nil
	}
	c := e.view.copy
	opts := &r.opts
	cw := &copyWatch{r: r, stream: stream}
	var err error
	switch {
	case opts.SendInitialEvents != nil && !*opts.SendInitialEvents && (opts.ResourceVersion == "" || opts.ResourceVersion == "0"):
		return nil // not what a reflector asks: kube-apiserver's to word
	case r.initialEvents() && !opts.AllowWatchBookmarks:
		return nil // kube-apiserver refuses it, with its words
	case r.initialEvents() || opts.ResourceVersion == "" || opts.ResourceVersion == "0":
		cw.wt, cw.initial, cw.at, err = c.WatchInitial(r.typ, r.filter)
	default:
		from, _ := strconv.ParseUint(opts.ResourceVersion, 10, 64) // copyAt parsed it
		cw.wt, err = c.WatchFrom(r.typ, r.filter, from)
	}
	// ErrExpired is the copy's 410, as kube-apiserver's watch cache
	// answers a version older than its window: the kubelet lists again,
	// from the copy. Sending the watch to the hub, whose log may reach
	// further, would hold a hub channel for the watch's life.
	if err != nil && !errors.Is(err, nodecopy.ErrExpired) {
		return nil
	}
	e.noteCopyRead(r, mode)
	cw.deadline = time.Now().Add(watchTimeout(route{timeout: opts.TimeoutSeconds}))
	return cw
}

// initialEvents reports whether r asks for the initial state first, as a
// streaming list.
func (r *copyRead) initialEvents() bool {
	return r.opts.SendInitialEvents != nil && *r.opts.SendInitialEvents
}

// startCopyWatch writes the response's head and the watch's initial
// events; false if the watch ends there.
func (cw *copyWatch) startCopyWatch() bool {
	cw.stream.start()
	if cw.wt == nil {
		cw.end(apierrors.NewResourceExpired(fmt.Sprintf(
			"too old resource version: %s: the node's copy keeps its changes from a later one", cw.r.opts.ResourceVersion)).ErrStatus)
		return false
	}
	initial := cw.initial
	cw.initial = nil // the copy's; the watch need not keep them
	events := cw.stream.events
	for _, o := range initial {
		if err := cw.write(watch.Added, o); err != nil {
			return false
		}
	}
	if cw.r.initialEvents() {
		if _, err := events.Write(watchmux.Event{Type: watch.Bookmark, Object: bookmarkOf(cw.r, cw.at, true)}); err != nil {
			return false
		}
	}
	cw.stream.flusher.Flush()
	cw.lastSent = time.Now()
	return true
}

// followCopyWatch sends the copy's changes until the watch ends. Its
// frame is under the watch for its life: what is not the wait is in its
// callees.
func (e *Endpoint) followCopyWatch(ctx context.Context, cw *copyWatch) {
	for {
		next := min(copyCheckInterval, time.Until(cw.deadline))
		if next <= 0 {
			return
		}
		wctx, cancel := context.WithTimeout(ctx, next)
		changes, at, err := cw.wt.Next(wctx)
		cancel()
		if !cw.send(ctx, changes, at, err) || !e.copyWatchKept(cw) {
			return
		}
	}
}

// send writes changes, then, unless the request is gone, the end err
// calls for, or a bookmark at at when the watch has been quiet for
// copyBookmarkInterval; false if the watch ends.
func (cw *copyWatch) send(ctx context.Context, changes []nodecopy.Change, at uint64, err error) bool {
	events := cw.stream.events
	for _, ch := range changes {
		if werr := cw.write(ch.Type, ch.Object); werr != nil {
			return false
		}
		cw.lastSent = time.Now()
	}
	switch {
	case ctx.Err() != nil:
		return false
	case errors.Is(err, nodecopy.ErrExpired):
		cw.end(apierrors.NewResourceExpired(
			"the node's copy started over behind its position, or the watch fell behind its log: list again").ErrStatus)
		return false
	case errors.Is(err, nodecopy.ErrLeft):
		// As the hub ends a channel whose graph edge went: the node may
		// no longer read the object.
		r := cw.r
		cw.end(metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
			Message: fmt.Sprintf("%s %s/%s left the node's view: no pod of the node uses it any more",
				r.viewType().Resource, r.filter.Namespace, r.filter.Name)})
		return false
	}
	if cw.r.opts.AllowWatchBookmarks && time.Since(cw.lastSent) >= copyBookmarkInterval {
		if _, err := events.Write(watchmux.Event{Type: watch.Bookmark, Object: bookmarkOf(cw.r, at, false)}); err != nil {
			return false
		}
		cw.lastSent = time.Now()
	}
	cw.stream.flusher.Flush()
	return true
}

// write writes an event of o, in the encoding the copy keeps it in: the
// relay passes it through to a client of that encoding, and transcodes it
// for another. An error is the client's connection failing.
func (cw *copyWatch) write(t watch.EventType, o *nodecopy.Object) error {
	ev := watchmux.Event{Type: t}
	if nodecopy.IsProtobuf(o.Raw) {
		ev.Protobuf = o.Raw
	} else {
		ev.Object = o.Raw
	}
	written, err := cw.stream.events.Write(ev)
	if err == nil {
		copyWritten(written.Reencoded).Inc()
	}
	return err
}

// end writes the watch's last event, an error of status s.
func (cw *copyWatch) end(s metav1.Status) {
	_, _ = cw.stream.events.Write(watchmux.Event{Type: watch.Error, Status: &s})
	cw.stream.flusher.Flush()
}

// copyWatchKept reports whether a watch of the copy may go on, and logs
// its end when not.
func (e *Endpoint) copyWatchKept(cw *copyWatch) bool {
	if e.copyWatchable() {
		return true
	}
	age, _ := e.view.age()
	klog.V(2).InfoS("Ended a watch of the node's copy: the copy stopped following the hub, and kube-apiserver answers",
		"resource", cw.r.viewType().Resource, "copyAge", age, "hubConnected", e.hub.Connected())
	return false // the kubelet watches again, from its last version, elsewhere
}

// How long the copy's watches stay open after it stopped following the
// hub while kube-apiserver answers, before they end and the kubelet
// watches kube-apiserver, whose answers the copy takes in (observe.go):
//
//   - copyLostGrace, when the hub went while kube-apiserver answered (a
//     replica lost, the hub's Service broken): as long as a session takes
//     to carry the view to another replica (hubResumeTimeout), so that a
//     failover moves nothing, and no longer, since every change the
//     kubelet does not see meanwhile is late;
//   - copyStaleAfter, when the node was offline since (an outage ends):
//     kube-apiserver is usually back before the hub, which lists its
//     cache from it, and the endpoints redial the hub on their backoff;
//     ending every watch at once would send every kubelet's watches to
//     kube-apiserver the moment it returns, the relist storm the copy is
//     there to spare it. Longer than the hub takes to return.
//
// Nothing is lost either way: the watch resumes from its version.
const (
	copyLostGrace  = hubResumeTimeout
	copyStaleAfter = 30 * time.Second
)

// copyWatchable reports whether the copy's watches may go on: while the
// copy follows the hub, or is offline, and for a grace after it stopped
// following (above).
func (e *Endpoint) copyWatchable() bool {
	if _, ok := e.copyMode(); ok {
		return true
	}
	stale, whole := e.view.staleFor()
	grace := copyLostGrace
	if e.view.offlineSinceLost() {
		grace = copyStaleAfter
	}
	return whole && stale < grace || e.view.catchingUp()
}

// bookmarkOf is a BOOKMARK of r's type at rv, ending the initial events
// if initialEnd.
func bookmarkOf(r *copyRead, rv uint64, initialEnd bool) json.RawMessage {
	t := r.viewType()
	m := metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: r.groupVersion().String(), Kind: t.Kind},
		ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.FormatUint(rv, 10)},
	}
	if initialEnd {
		m.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	}
	b, _ := json.Marshal(&m)
	return b
}
