package endpoint

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/watchmux"
)

// minWatchTimeout is kube-apiserver's default --min-request-timeout: a
// watch without timeoutSeconds ends after a random time between it and
// twice it, so that reconnects spread out.
const minWatchTimeout = 30 * time.Minute

// serveRead answers r from the hub. It returns false, having written
// nothing, when the hub cannot answer (down, failing, or unable to serve
// this form of the request); the caller then proxies the request.
func (e *Endpoint) serveRead(w http.ResponseWriter, req *http.Request, r route, hub *Hub) bool {
	if r.verb == "watch" {
		return e.serveWatch(w, req, r, hub)
	}
	raw, err := hub.Get(req.Context(), r.op)
	if err != nil && !decisive(err) {
		e.noteFallback(err, r)
		return false
	}
	r.who.metrics().requests.WithLabelValues(pathHub, r.op.Resource.Resource, r.verb).Inc()
	if err != nil {
		writeError(w, req, err)
		return true
	}
	list, err := runtime.Decode(deserializer, raw)
	if err != nil {
		writeError(w, req, apierrors.NewInternalError(fmt.Errorf("decode the hub's list: %w", err)))
		return true
	}
	if r.toCopy != nil {
		e.view.observeHubList(r.toCopy, list)
	}
	var obj runtime.Object = list
	if r.verb == "get" {
		items, err := meta.ExtractList(list)
		if err != nil || len(items) != 1 {
			gr := schema.GroupResource{Resource: r.op.Resource.Resource}
			writeError(w, req, apierrors.NewNotFound(gr, r.name))
			return true
		}
		obj = items[0]
	}
	writeObjectIn(w, req, http.StatusOK, obj, r.groupVersion())
	return true
}

// serveWatch streams a hub channel to the kubelet as kube-apiserver
// streams a watch: chunked, framed and encoded as negotiated, flushed
// whenever the channel has nothing more queued, ended after
// timeoutSeconds. The channel outlives a hub replica (Hub). Its ERROR
// becomes the watch's last event, as kube-apiserver ends a watch whose
// resourceVersion expired; an end without ERROR (no replica took the
// channel back in time, or the endpoint is stopping) ends the watch
// cleanly, and the kubelet's reflector watches again from the last
// resourceVersion it saw, which kube-apiserver honours as well as the
// hub, since both count in etcd's revisions.
//
// k8s.io/apiserver's own WatchServer is not used: its watch-list hook is
// unexported and must be set for streaming lists. What it does is this
// loop; the framing and encoding are the library's.
func (e *Endpoint) serveWatch(w http.ResponseWriter, req *http.Request, r route, hub *Hub) bool {
	stream, ok := newWatchStream(w, req, r.groupVersion())
	if !ok {
		return false
	}
	events, flusher := stream.events, stream.flusher
	ch, err := hub.Watch(req.Context(), r.op, events.Protobuf())
	if err != nil && !decisive(err) {
		e.noteFallback(err, r)
		return false
	}
	resource := r.op.Resource.Resource
	m := r.who.metrics()
	m.requests.WithLabelValues(pathHub, resource, r.verb).Inc()
	if err != nil {
		writeError(w, req, err)
		return true
	}
	m.watches.WithLabelValues(pathHub, resource).Inc()
	defer m.watches.WithLabelValues(pathHub, resource).Dec()
	open := true
	defer func() {
		if open {
			// The kubelet left, or the watch timed out: free the channel
			// without holding the handler.
			go closeChannel(ch)
		}
	}()

	timeout := watchTimeout(r)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var caughtUp <-chan struct{} // nil: never
	if r.toCopy != nil {
		caughtUp = e.view.caughtUpSignal()
	}

	stream.start()
	for {
		select {
		case <-req.Context().Done():
			return true
		case <-timer.C:
			return true
		case <-caughtUp:
			// The kubelet watches again, from its last version, and
			// the copy answers.
			return true
		case ev, ok := <-ch.Events:
			if !ok {
				open = false // given up, or stopping: nothing to close
				return true
			}
			if ev.Type == watch.Error {
				open = false
			}
			if r.toCopy != nil {
				e.view.observeHubEvent(ev)
			}
			sent, err := events.Write(ev)
			if err != nil {
				return true // the kubelet went away
			}
			if sent.Type != ev.Type {
				klog.ErrorS(nil, "Undecodable event from the hub; ended the watch so the kubelet relists", "resource", resource)
			}
			if ev.Type != watch.Error && ev.Type != watch.Bookmark {
				// Bookmarks are left out: every hub sends them as JSON,
				// and they would blur what the count tells, which hub
				// sends objects as the watch wants them.
				relayed(sent.Reencoded).Inc()
			}
			ev.Type = sent.Type
			if ev.Type == watch.Error {
				flusher.Flush()
				if open {
					go closeChannel(ch)
					open = false
				}
				return true
			}
			if len(ch.Events) == 0 {
				flusher.Flush()
			}
		}
	}
}

// watchTimeout is timeoutSeconds, or kube-apiserver's default when the
// request has none.
func watchTimeout(r route) time.Duration {
	if t := r.timeout; t != nil && *t > 0 {
		return time.Duration(*t) * time.Second
	}
	return minWatchTimeout + time.Duration(rand.Int64N(int64(minWatchTimeout)))
}

func closeChannel(ch *watchmux.SessionChannel) {
	ctx, cancel := context.WithTimeout(context.Background(), hubRequestTimeout)
	defer cancel()
	_ = ch.Close(ctx)
}

// Reasons a hub-served read went to kube-apiserver, the values of the
// fallbacks metric's "reason" label.
const (
	fallbackDown     = "down"      // no hub connection
	fallbackNotFound = "not_found" // a 404 on the hub's path, which the hub never answers
	fallbackError    = "error"     // the hub failed, or refused the form of the request
)

func (e *Endpoint) noteFallback(err error, r route) {
	reason := fallbackError
	switch {
	case err == errHubDown:
		reason = fallbackDown
	case apierrors.IsNotFound(err):
		reason = fallbackNotFound
		// Not the hub's answer (see decisive): a misrouted hub address
		// or an old replica, which the operator must fix. Logged at
		// the default level; the counter says how often.
		klog.InfoS("404 on the hub's path, which the hub never answers; asking kube-apiserver", "hub", e.hub.cfg.Host, "resource", r.op.Resource.Resource, "verb", r.verb, "err", err)
	default:
		klog.V(2).InfoS("Hub did not answer; asking kube-apiserver", "resource", r.op.Resource.Resource, "verb", r.verb, "err", err)
	}
	fallbacks.WithLabelValues(reason).Inc()
}
