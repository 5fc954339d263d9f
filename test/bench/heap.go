package bench

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
)

// afterGC scrapes kube-apiserver's /metrics right after forcing a
// garbage collection there (its /debug/pprof/heap?gc=1 runs one before
// it profiles, and needs --profiling, kube-apiserver's default), so that
// its go_memstats_heap_alloc_bytes is the memory its live objects hold.
// RSS and an unforced heap reading drift with the collector's timing by
// tens of MiB; this drifts by what is allocated between the collection
// and the scrape.
func afterGC(ctx context.Context, client rest.Interface) (Metrics, error) {
	if _, err := client.Get().AbsPath("/debug/pprof/heap").Param("gc", "1").DoRaw(ctx); err != nil {
		return nil, fmt.Errorf("force a garbage collection in kube-apiserver: %w", err)
	}
	return ScrapeAPIServer(ctx, client)
}
