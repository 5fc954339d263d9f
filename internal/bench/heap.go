package bench

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
)

// liveHeap is the memory kube-apiserver's live objects hold: it forces a
// garbage collection there (its /debug/pprof/heap?gc=1 runs one before
// it profiles, and needs --profiling, kube-apiserver's default) and then
// reads the heap allocated. RSS and an unforced heap reading drift with
// the collector's timing by tens of MiB; this drifts by what is
// allocated between the collection and the scrape.
func liveHeap(ctx context.Context, client rest.Interface) (int64, error) {
	if _, err := client.Get().AbsPath("/debug/pprof/heap").Param("gc", "1").DoRaw(ctx); err != nil {
		return 0, fmt.Errorf("force a garbage collection in kube-apiserver: %w", err)
	}
	m, err := ScrapeAPIServer(ctx, client)
	if err != nil {
		return 0, err
	}
	return int64(m.Sum("go_memstats_heap_alloc_bytes")), nil
}
