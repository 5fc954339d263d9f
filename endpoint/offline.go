package endpoint

import (
	"context"
	"time"

	"k8s.io/klog/v2"
)

// offlineCheckInterval is how often the endpoint looks at whether the
// node is offline, for its log, its metrics and /readyz. The reads
// themselves decide each time (copyMode).
const offlineCheckInterval = 5 * time.Second

// offline reports whether the node is offline: neither the hub nor
// kube-apiserver answers it.
func (e *Endpoint) offline() bool {
	return !e.hub.Connected() && e.ready.apiServerReady() != nil
}

// watchOffline logs the node going offline (neither the hub nor
// kube-apiserver answers) and coming back, and keeps the copy's gauges,
// until ctx ends.
func (e *Endpoint) watchOffline(ctx context.Context) {
	tick := time.NewTicker(offlineCheckInterval)
	defer tick.Stop()
	var since time.Time // zero while online
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		copyObjects.Set(float64(e.view.copy.Len()))
		_, refused := e.view.servableOffline(e.offlineMaxAge)
		if refused == "" {
			copyVouched.Set(1)
		} else {
			copyVouched.Set(0)
		}
		age, whole := e.view.age()
		if !whole {
			copyAge.Set(-1)
		} else {
			copyAge.Set(age.Seconds())
		}
		offline := e.offline()
		switch {
		case offline && since.IsZero():
			since = time.Now()
			offlineSince.Set(float64(since.Unix()))
			pos, _ := e.view.copy.Position()
			klog.InfoS("Node offline: neither the hub nor kube-apiserver answers; the kubelet's reads of the node's view are served from its copy",
				"copyAge", age.Round(time.Second), "objects", e.view.copy.Len(), "position", pos, "offlineMaxAge", e.offlineMaxAge)
		case !offline && !since.IsZero():
			klog.InfoS("Node back online", "offlineFor", time.Since(since).Round(time.Second), "hubConnected", e.hub.Connected())
			since = time.Time{}
			offlineSince.Set(0)
		case offline && refused != "":
			klog.V(2).InfoS("Node offline, and its copy is not served", "reason", refused, "copyAge", age.Round(time.Second))
		}
	}
}
