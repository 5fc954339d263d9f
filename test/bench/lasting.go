package bench

import (
	"context"
	"time"

	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// lastingWindow is how long lastingWatches samples: longer than a hub
// replica's probe of a quiet type lasts (a watch of kube-apiserver until
// its bookmark, 1 to 2.25 s; docs/api.md, "Which resourceVersion gives
// what"), which it opens only while consistent reads wait.
const lastingWindow = 4 * time.Second

// lastingWatches is count's least value over lastingWindow, sampled every
// 250 ms: the watches that stay open on kube-apiserver. A node's watch
// lasts its timeout (minutes); the hub's probes, which kube-apiserver
// counts in the same series, end within the window once no read waits.
func lastingWatches(ctx context.Context, count func(context.Context) (float64, error)) (float64, error) {
	least, err := count(ctx)
	if err != nil {
		return 0, err
	}
	for end := time.Now().Add(lastingWindow); time.Now().Before(end); {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
		n, err := count(ctx)
		if err != nil {
			return 0, err
		}
		least = min(least, n)
	}
	return least, nil
}

// LongRunningFrom is what clients started since before hold open on
// kube-apiserver (through client, an admin's REST client): its
// long-running requests (watches, and proxy, exec, attach and
// port-forward connections) less before, series by series, at the
// sample of lastingWindow, one every 250 ms, with the fewest in all. As
// lastingWatches, it leaves out the hub's probes, which end within the
// window.
func LongRunningFrom(ctx context.Context, client rest.Interface, before controlplane.LongRunningRequests) (controlplane.LongRunningRequests, error) {
	var least controlplane.LongRunningRequests
	_, err := lastingWatches(ctx, func(ctx context.Context) (float64, error) {
		now, err := controlplane.ReadLongRunningRequests(ctx, client)
		if err != nil {
			return 0, err
		}
		d := now.Minus(before)
		if least == nil || d.Count("", "") < least.Count("", "") {
			least = d
		}
		return float64(d.Count("", "")), nil
	})
	return least, err
}
