package hub

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	toolscache "k8s.io/client-go/tools/cache"

	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
)

// FeedGraph makes the graph hear of every change to the types it is built
// from before the cache shows the change to anyone: a node that saw its
// pod in a list finds the graph already lets it read what the pod uses.
func FeedGraph(c *cache.Cache, g *graph.Graph) error {
	handlers := map[string]toolscache.ResourceEventHandler{
		"pods":              g.PodHandler(),
		"persistentvolumes": g.PVHandler(),
		"volumeattachments": g.VolumeAttachmentHandler(),
		"resourceslices":    g.ResourceSliceHandler(),
	}
	fed := 0
	for _, gvr := range cache.Watched() {
		if h, ok := handlers[gvr.Resource]; ok {
			c.Store(gvr).AddHandler(h)
			fed++
		}
	}
	if fed != len(handlers) {
		return fmt.Errorf("the cache lacks %d of the types the graph needs", len(handlers)-fed)
	}
	return nil
}

// cacheSynced passes once every store has taken in its first list (and so
// has the graph, which the stores feed as they take it in). Before that
// an empty store would read as "no such object": for the authorizer a
// wrong deny, for a bulk get a wrong empty list.
func cacheSynced(c *cache.Cache) func(*http.Request) error {
	return func(*http.Request) error {
		if missing := c.Unsynced(); len(missing) > 0 {
			return errors.New("not yet listed: " + strings.Join(missing, ", "))
		}
		return nil
	}
}

// cacheWatching fails while some type has been unable to list and watch
// kube-apiserver for longer than bound (0: never fails). A type that has
// heard nothing for minutes is not failing by itself (a quiet type hears
// only bookmarks, about one a minute); one whose lists and watches have
// all failed since some moment is. The bound is long enough that a
// kube-apiserver restart, which every replica sees at once, never fails
// the check (see DefaultCacheMaxWatchOutage).
func cacheWatching(c *cache.Cache, bound time.Duration) func(*http.Request) error {
	return func(*http.Request) error {
		if bound <= 0 {
			return nil
		}
		var stale []string
		for _, f := range c.Freshness() {
			if f.Outage > bound {
				stale = append(stale, fmt.Sprintf("%s for %s (%s)", f.Resource, f.Outage.Round(time.Second), f.LastError))
			}
		}
		if len(stale) > 0 {
			return fmt.Errorf("unable to list and watch kube-apiserver longer than %s: %s", bound, strings.Join(stale, "; "))
		}
		return nil
	}
}
