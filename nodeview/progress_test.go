package nodeview

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// heldProgress answers every probe with (from, from): no change and no
// bookmark past where it began, hub's answer for a probe kube-apiserver
// had nothing newer to bookmark for; each probe is held until release is
// closed.
type heldProgress struct {
	release chan struct{}
	mu      sync.Mutex
	asked   int
}

func (h *heldProgress) Progress(ctx context.Context, _ schema.GroupVersionResource, from uint64) (uint64, uint64, error) {
	h.mu.Lock()
	h.asked++
	h.mu.Unlock()
	select {
	case <-h.release:
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	return from, from, nil
}

// TestSpanWithNothingPastItsStartIsShared: resumes waiting on a probe
// that shows nothing past its start take that answer (their own
// version) rather than each asking again at once, as after a failed
// probe.
func TestSpanWithNothingPastItsStartIsShared(t *testing.T) {
	src := &heldProgress{release: make(chan struct{})}
	p := newSpans(src)
	i := typeIndex("runtimeclasses")
	got := make(chan uint64, 3)
	for range 3 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got <- p.extend(ctx, i, 40)
		}()
	}
	time.Sleep(50 * time.Millisecond) // all three wait on the one probe
	close(src.release)
	for range 3 {
		if v := <-got; v != 40 {
			t.Fatalf("extended to %d, want 40: kube-apiserver showed nothing past it", v)
		}
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if src.asked != 1 {
		t.Errorf("%d probes for three resumes waiting on one, want 1", src.asked)
	}
}
