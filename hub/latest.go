package hub

import (
	"context"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/bulk"
)

// latestVersions asks kube-apiserver for its current resourceVersion of a
// type with the cheapest consistent read there is: a list with
// resourceVersion "" (so the version is at least every one
// kube-apiserver had handed out when it was asked), one item, metadata
// only. kube-apiserver serves it from its watch cache once that has
// caught up with etcd (ConsistentListFromCache), else from etcd, one key.
// The bulk requests ask it, at most one request every 200 ms per type
// (bulk.LatestChecker), for every consistent read and when a channel resumes from
// a version this replica's cache has not reached; each answer also
// settles every later resume at or below it. That
// coalescing is what bounds the requests, so the client has no
// client-side rate limit (New).
type latestVersions struct{ client metadata.Interface }

var _ bulk.LatestVersions = latestVersions{}

func (l latestVersions) LatestVersion(ctx context.Context, resource schema.GroupVersionResource) (uint64, error) {
	list, err := l.client.Resource(resource).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, fmt.Errorf("list %s with limit 1: %w", resource.Resource, err)
	}
	rv, err := strconv.ParseUint(list.ResourceVersion, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("list %s: resourceVersion %q: %w", resource.Resource, list.ResourceVersion, err)
	}
	return rv, nil
}

var _ bulk.Progress = latestVersions{}

// progressWatchSeconds is the probe watch's timeoutSeconds: the least for
// which kube-apiserver's cacher sends a bookmark, which it schedules 2 s
// before the watch's deadline (cache_watcher.go, nextBookmarkTime); with
// 2, that moment has passed when the watcher is registered and no
// bookmark comes.
const progressWatchSeconds = 3

// Progress watches resource from resourceVersion from, metadata only,
// with bookmarks and timeoutSeconds 3: kube-apiserver's watch cache sends
// every change after from, then its bookmark about a second in, at the
// version it has processed. A watch costs kube-apiserver no read of etcd;
// every consistent read of a quiet type waiting on this replica shares
// it (bulk.ProgressChecker).
//
// The cache sends a watch a bookmark only at a version past the watch's
// own (cache_watcher.go, process), and a watch this short is due one
// only once. The cache of a type nobody writes learns of etcd's newer
// revisions only from etcd's progress notifications, which kube-apiserver
// asks for when a consistent read waits (the replica's own question for
// the latest version, LatestVersion): a probe due its bookmark before
// then, from a store as current as the cache, gets none and ends at its
// timeout. That is an answer, not a failure: kube-apiserver has shown
// nothing past the last change it sent, and Progress says so (through is
// last), so that the reads waiting take the next probe's answer. A watch
// that ends sooner was cut (kube-apiserver going away, the connection
// lost): that one is an error, which rests the type's probes.
func (l latestVersions) Progress(ctx context.Context, resource schema.GroupVersionResource, from uint64) (last, through uint64, err error) {
	if from == 0 {
		// A watch from "0" is one from any version: kube-apiserver's
		// state as synthetic ADDED events in key order, whose last proves
		// nothing about the objects before it (bulk.ErrUnsynced).
		return 0, 0, fmt.Errorf("watch %s from 0: %w", resource.Resource, bulk.ErrUnsynced)
	}
	start := time.Now()
	w, err := l.client.Resource(resource).Watch(ctx, metav1.ListOptions{
		ResourceVersion:     strconv.FormatUint(from, 10),
		AllowWatchBookmarks: true,
		TimeoutSeconds:      ptr.To[int64](progressWatchSeconds),
	})
	if err != nil {
		return 0, 0, fmt.Errorf("watch %s from %d: %w", resource.Resource, from, err)
	}
	defer w.Stop()
	last = from
	for {
		var ev watch.Event
		var ok bool
		select {
		case ev, ok = <-w.ResultChan():
		case <-ctx.Done():
			return 0, 0, fmt.Errorf("watch %s from %d: no bookmark: %w", resource.Resource, from, ctx.Err())
		}
		if !ok {
			if err := ctx.Err(); err != nil {
				return 0, 0, fmt.Errorf("watch %s from %d: no bookmark: %w", resource.Resource, from, err)
			}
			if took := time.Since(start); took < progressWatchSeconds*time.Second {
				return 0, 0, fmt.Errorf("watch %s from %d: ended after %s, before its timeout, without a bookmark", resource.Resource, from, took.Round(time.Millisecond))
			}
			return last, last, nil
		}
		if ev.Type == watch.Error {
			return 0, 0, fmt.Errorf("watch %s from %d: %w", resource.Resource, from, apierrors.FromObject(ev.Object))
		}
		m, err := meta.Accessor(ev.Object)
		if err != nil {
			return 0, 0, fmt.Errorf("watch %s from %d: %s event: %w", resource.Resource, from, ev.Type, err)
		}
		rv, err := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("watch %s from %d: %s event: resourceVersion %q: %w", resource.Resource, from, ev.Type, m.GetResourceVersion(), err)
		}
		if ev.Type == watch.Bookmark {
			return last, rv, nil
		}
		last = rv
	}
}
