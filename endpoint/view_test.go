package endpoint

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics/testutil"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/nodecopy"
	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// stepHub is a hub replica that serves node views by hand: each view
// channel it opens waits in opened for the test to send its batches.
type stepHub struct {
	opened chan watchmux.Sink
	// positions are the positions the views were opened from.
	mu        sync.Mutex
	positions []string
}

func (h *stepHub) Open(_ context.Context, sel *v1alpha1.GetOperation, sink watchmux.Sink) (func(), *metav1.Status) {
	if sel.Resource.Resource != v1alpha1.NodeViewResourceV1alpha2.Resource {
		return nil, &metav1.Status{Code: http.StatusUnprocessableEntity, Message: "only node views here"}
	}
	h.mu.Lock()
	h.positions = append(h.positions, sel.Options.ResourceVersion)
	h.mu.Unlock()
	return func() { h.opened <- sink }, nil
}

// startStepHub runs a stepHub and a Hub connected to it, until the test
// ends.
func startStepHub(t *testing.T) (*stepHub, *Hub) {
	t.Helper()
	h := &stepHub{opened: make(chan watchmux.Sink, 16)}
	srv := watchmux.NewServer(h, watchmux.DefaultOptions())
	hs := httptest.NewTLSServer(srv)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hs.Certificate().Raw})
	hub, err := NewHub(&rest.Config{Host: hs.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { hub.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = srv.Shutdown(context.Background())
		hs.Close()
	})
	return h, hub
}

// viewPosition is a position of the node view with every type at rv.
func viewPosition(rv uint64) string {
	var p v1alpha1.NodeViewPosition
	for i := range p.At {
		p.Since[i], p.At[i] = rv, rv
	}
	return p.String()
}

// bookmark is the node view's bookmark at pos.
func bookmark(pos string) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"bulk.k8s.io/v1alpha2","kind":"NodeView","metadata":{"resourceVersion":%q}}`, pos)
}

// followStepHub starts f following the view until the test ends.
func followStepHub(t *testing.T, f *viewFollower) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestCopyIsNotLiveBeforeItsFirstBatch: a copy from before (a restart:
// loaded from disk, of any age) is not live when its channel opens, but
// once the channel has applied a batch, the resume's first bookmark: until
// then it holds what it held, not what the hub has.
func TestCopyIsNotLiveBeforeItsFirstBatch(t *testing.T) {
	step, hub := startStepHub(t)
	f := newViewFollower(hub, "node-a")
	if _, err := f.copy.Apply(nodecopy.Batch{Initial: true, Position: viewPosition(10)}); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.lost = time.Now().Add(-48 * time.Hour) // saved two days ago
	f.mu.Unlock()
	followStepHub(t, f)

	var sink watchmux.Sink
	select {
	case sink = <-step.opened:
	case <-time.After(30 * time.Second):
		t.Fatal("the view was not opened within 30 s")
	}
	testserver.Eventually(t, 10*time.Second, "the follower holds the channel", func(context.Context) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.channel == nil {
			return fmt.Errorf("no channel")
		}
		return nil
	})
	if f.live() {
		t.Error("the copy is live on a channel that has applied nothing yet")
	}
	if age, _ := f.age(); age < 47*time.Hour {
		t.Errorf("the copy's age %s before its first batch; want the two days it has not followed", age)
	}

	sink.Send(watch.Bookmark, bookmark(viewPosition(20)))
	testserver.Eventually(t, 10*time.Second, "the copy live after its first batch", func(context.Context) error {
		if !f.live() {
			return fmt.Errorf("not live")
		}
		return nil
	})
	if age, _ := f.age(); age != 0 {
		t.Errorf("the copy's age %s once live; want 0", age)
	}
}

// span is a position of the node view with every type at rv but runtime
// classes, at since-at.
func span(since, at, rv uint64) string {
	var p v1alpha1.NodeViewPosition
	for i := range p.At {
		p.Since[i], p.At[i] = rv, rv
	}
	rc := v1alpha1.NodeViewTypeIndex("runtimeclasses")
	p.Since[rc], p.At[rc] = since, at
	return p.String()
}

// TestAResumeBehindTheCopyIsNotAReopening: the view resumes on a replica
// behind the copy on a quiet type. A first bookmark within what the copy
// holds is taken: no reopening. One before it would take the copy back:
// it is refused and counted, and the view is resumed again from the
// copy's position, not opened afresh (which would send it whole).
func TestAResumeBehindTheCopyIsNotAReopening(t *testing.T) {
	step, hub := startStepHub(t)
	f := newViewFollower(hub, "node-a")
	held := span(700, 812, 812)
	if _, err := f.copy.Apply(nodecopy.Batch{Initial: true, Position: held}); err != nil {
		t.Fatal(err)
	}
	followStepHub(t, f)
	next := func() watchmux.Sink {
		t.Helper()
		select {
		case sink := <-step.opened:
			return sink
		case <-time.After(30 * time.Second):
			t.Fatal("the view was not opened within 30 s")
			return nil
		}
	}
	sink := next()
	behind := span(700, 790, 815)
	sink.Send(watch.Bookmark, bookmark(behind))
	testserver.Eventually(t, 10*time.Second, "the resume's bookmark taken", func(context.Context) error {
		if pos, _ := f.copy.Position(); pos != behind {
			return fmt.Errorf("position %s", pos)
		}
		return nil
	})
	if !f.live() {
		t.Error("the copy is not live after a bookmark within what it holds")
	}

	RegisterMetrics()
	refusedBefore := refusedResumes(t)
	sink.Send(watch.Bookmark, bookmark(span(600, 650, 816)))
	next() // opened again
	step.mu.Lock()
	positions := append([]string(nil), step.positions...)
	step.mu.Unlock()
	if want := []string{held, behind}; fmt.Sprint(positions) != fmt.Sprint(want) {
		t.Errorf("the view opened from %q; want %q: resumed from the copy's position each time, never afresh", positions, want)
	}
	if at, _ := f.copy.At(v1alpha1.NodeViewTypeIndex("runtimeclasses")); at != 812 {
		t.Errorf("runtime classes answered at %d; want 812", at)
	}
	if d := refusedResumes(t) - refusedBefore; d != 1 {
		t.Errorf("%v refused resumes counted; want 1", d)
	}
}

func refusedResumes(t *testing.T) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(viewResumesRefused)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
