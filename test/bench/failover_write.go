package bench

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// failoverWriters is how many updates are in flight at once: a patch
// takes a few milliseconds on the local control plane, so 8 sustain a few
// hundred a second.
const failoverWriters = 8

// failoverWriter updates the secrets round robin and remembers the
// resourceVersion of every update kube-apiserver confirmed.
type failoverWriter struct {
	kube  kubernetes.Interface
	names []string

	runID int64 // tells this run's values from earlier runs'

	mu     sync.Mutex
	rvs    []map[uint64]bool // by secret
	lastRV []uint64
	n      int
	failed int
}

func newFailoverWriter(kube kubernetes.Interface, names []string) *failoverWriter {
	w := &failoverWriter{kube: kube, names: names, runID: time.Now().UnixNano(), rvs: make([]map[uint64]bool, len(names)), lastRV: make([]uint64, len(names))}
	for i := range w.rvs {
		w.rvs[i] = map[uint64]bool{}
	}
	return w
}

// run writes rate updates a second until ctx ends.
func (w *failoverWriter) run(ctx context.Context, rate int) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range failoverWriters {
		wg.Go(func() {
			for i := range next {
				w.write(ctx, i)
			}
		})
	}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
			close(next)
			wg.Wait()
			return
		}
		select {
		case next <- i % len(w.names):
		case <-ctx.Done():
		}
	}
}

func (w *failoverWriter) write(ctx context.Context, i int) {
	w.mu.Lock()
	w.n++
	// Unique across runs: a patch that changes nothing is no write at
	// all (kube-apiserver answers the object as it was, with its old
	// resourceVersion), and a run that wrote what an earlier run did
	// would count events that never were.
	v := base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "%d-%d", w.runID, w.n))
	w.mu.Unlock()
	patch := fmt.Appendf(nil, `{"data":{"v":%q}}`, v)
	s, err := w.kube.CoreV1().Secrets(failoverNamespace).Patch(context.WithoutCancel(ctx), w.names[i], types.MergePatchType, patch, metav1.PatchOptions{})
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		// The write may or may not have happened: its event, if any,
		// counts as never written.
		w.failed++
		klog.V(2).InfoS("Failover write failed", "secret", w.names[i], "err", err)
		return
	}
	rv, err := strconv.ParseUint(s.ResourceVersion, 10, 64)
	if err != nil {
		w.failed++
		return
	}
	w.rvs[i][rv] = true
	w.lastRV[i] = max(w.lastRV[i], rv)
}

func (w *failoverWriter) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n - w.failed
}

func (w *failoverWriter) failures() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failed
}

func (w *failoverWriter) last(i int) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastRV[i]
}

func (w *failoverWriter) written(i int) map[uint64]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rvs[i]
}
