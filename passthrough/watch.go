package passthrough

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
)

// Sink is where an uncached channel's events go; a watchmux channel is
// one. Send never blocks and returns false once the channel is closed;
// OnClose runs f when it closes, for whatever reason; Close ends it with
// an ERROR carrying status.
type Sink interface {
	Send(t watch.EventType, object []byte) bool
	OnClose(f func())
	Close(status *metav1.Status)
}

// roomWaiter is a Sink that can hold its producer back (watchmux's
// channels can): the upstream watch is read no faster than the client
// takes its events, instead of overflowing the channel.
type roomWaiter interface {
	WaitRoom() bool
}

// Watch opens a watch on t in namespace ("" for all) as the user in ctx
// (the channel's context: it ends when the channel closes) and returns
// run, which relays its events to sink until the channel closes or the
// watch ends for good. A refused watch (kube-apiserver's 403, 404, 410...)
// is returned as kube-apiserver's Status error and nothing is left open.
//
// opts are the channel's (resourceVersion, resourceVersionMatch,
// sendInitialEvents, selectors), sent as they are; bookmarks are always
// asked of kube-apiserver, and passed on only if the channel asked for
// them, because they are what makes a watch resumable (see relay).
func (c *Client) Watch(ctx context.Context, t Type, namespace string, opts metav1.ListOptions, sink Sink) (run func(), err error) {
	if err := checkCaller(ctx); err != nil {
		observe(verbWatch, err)
		return nil, err
	}
	u := &upstream{client: c, t: t, namespace: namespace, opts: opts, sink: sink, bookmarks: opts.AllowWatchBookmarks}
	// A watch from a given resourceVersion without an initial state
	// carries only changes: every event's version is a resume point. Any
	// other watch starts with the state as ADDED events in no version
	// order, and can be resumed only once a bookmark says that state has
	// been sent.
	initial := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	if opts.ResourceVersion != "" && opts.ResourceVersion != "0" && !initial {
		u.lastRV = opts.ResourceVersion
	}
	body, err := u.open(ctx)
	observe(verbWatch, err)
	if err != nil {
		return nil, err
	}
	openChannels.Inc()
	// run is not called for a channel closed before it was announced:
	// whichever of run and OnClose comes first owns the first body.
	var started atomic.Bool
	sink.OnClose(func() {
		if !started.Swap(true) {
			body.Close()
			openChannels.Dec()
		}
	})
	return func() {
		if started.Swap(true) {
			return
		}
		defer openChannels.Dec()
		u.run(ctx, body)
	}, nil
}

// upstream is one channel's watch on kube-apiserver, across re-opens.
type upstream struct {
	client    *Client
	t         Type
	namespace string
	opts      metav1.ListOptions
	sink      Sink
	bookmarks bool // the channel asked for them
	// lastRV is the resume point: the version of the last event relayed,
	// once the watch carries changes only; "" before.
	lastRV string
}

// reopenBackoff spaces the attempts to re-open a watch that ended without
// an error, before the channel ends: about 3 s in all, as long as a
// kube-apiserver replica behind a Service takes to be replaced by
// another; beyond it, the client's own retry (a relist) is as cheap.
var reopenBackoff = []time.Duration{0, 200 * time.Millisecond, 800 * time.Millisecond, 2 * time.Second}

// errSinkClosed: the channel closed while an event was being relayed.
var errSinkClosed = errors.New("channel closed")

// run relays events until the channel closes or the watch cannot go on.
func (u *upstream) run(ctx context.Context, body io.ReadCloser) {
	for {
		err := u.relay(body)
		body.Close()
		if ctx.Err() != nil || errors.Is(err, errSinkClosed) {
			return
		}
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			// kube-apiserver's ERROR (410 Expired, most often) is the
			// channel's last event, as it would be the watch's.
			st := status.Status()
			u.sink.Close(&st)
			return
		}
		if u.lastRV == "" {
			reopens.WithLabelValues(reopenNotResumable).Inc()
			u.sink.Close(&apierrors.NewResourceExpired(fmt.Sprintf(
				"the watch on kube-apiserver of %s ended (%v) before its initial state was known to be complete; list again", u.t.Resource, err)).ErrStatus)
			return
		}
		klog.V(4).InfoS("Re-opening a watch on kube-apiserver", "resource", u.t.Resource, "namespace", u.namespace, "resourceVersion", u.lastRV, "err", err)
		body, err = u.reopen(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			reopens.WithLabelValues(reopenFailed).Inc()
			var status apierrors.APIStatus
			if !errors.As(err, &status) {
				err = apierrors.NewServiceUnavailable(err.Error())
				errors.As(err, &status)
			}
			st := status.Status()
			u.sink.Close(&st)
			return
		}
		reopens.WithLabelValues(reopenOK).Inc()
	}
}

// reopen opens the watch again from lastRV, as a reflector does. A
// Status from kube-apiserver (410: lastRV is too old; 403: the caller's
// rights are gone) is final; a failure to reach it is tried again.
func (u *upstream) reopen(ctx context.Context) (io.ReadCloser, error) {
	u.opts.ResourceVersion = u.lastRV
	u.opts.ResourceVersionMatch = ""
	u.opts.SendInitialEvents = nil
	var err error
	for _, wait := range reopenBackoff {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		var body io.ReadCloser
		body, err = u.open(ctx)
		if err == nil {
			return body, nil
		}
		if _, ok := err.(apierrors.APIStatus); ok && !apierrors.IsInternalError(err) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("re-open the watch of %s from resourceVersion %s: %w", u.t.Resource, u.lastRV, err)
}

// open sends one WATCH request as the user in ctx.
func (u *upstream) open(ctx context.Context) (io.ReadCloser, error) {
	opts := u.opts
	opts.Watch = true
	opts.AllowWatchBookmarks = true
	secs := int64(u.client.watchTimeout() / time.Second)
	opts.TimeoutSeconds = &secs
	url := u.client.request(u.t, u.namespace).SpecificallyVersionedParams(&opts, metav1.ParameterCodec, parameterVersion).URL()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url.String(), nil)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("watch %s: %w", u.t.Resource, err))
	}
	req.Header.Set("Accept", "application/json")
	resp, err := u.client.http.Do(req)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("watch %s as the caller: %w", u.t.Resource, err))
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		raw, readErr := io.ReadAll(io.LimitReader(resp.Body, maxStatusBytes))
		return nil, apiError("watch", u.t, raw, errors.Join(fmt.Errorf("%s", resp.Status), readErr))
	}
	return resp.Body, nil
}

// maxStatusBytes bounds the body read from a refused watch: a Status is
// a few hundred bytes.
const maxStatusBytes = 64 << 10

// reflectorWatchTimeout is each upstream watch's timeoutSeconds: between
// 5 and 10 minutes at random, as client-go's reflector asks, so that
// after a rolling update of kube-apiserver the watches of a long-lived
// hub spread over every replica again rather than staying on the first
// one up. A re-open costs one request and no relist.
func reflectorWatchTimeout() time.Duration {
	return 5*time.Minute + rand.N(5*time.Minute)
}
