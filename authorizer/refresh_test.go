package authorizer

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/nodeproxy/nodeproxy/graph"
)

// fakeAPI stands in for kube-apiserver's list of a node's pods: each call
// is recorded and blocks until the test releases it (or its context ends).
type fakeAPI struct {
	mu      sync.Mutex
	calls   []string    // nodes, in call order
	starts  []time.Time // when each call began
	release chan struct{}
	rv      uint64
	err     error
	// deaf makes a call ignore its context, as a list stuck below the
	// client's deadline handling would.
	deaf bool
}

func newFakeAPI() *fakeAPI { return &fakeAPI{release: make(chan struct{}), rv: 42} }

func (f *fakeAPI) latest(ctx context.Context, node string) (uint64, error) {
	f.mu.Lock()
	f.calls = append(f.calls, node)
	f.starts = append(f.starts, time.Now())
	f.mu.Unlock()
	done := ctx.Done()
	if f.deaf {
		done = nil
	}
	select {
	case <-f.release:
		return f.rv, f.err
	case <-done:
		return 0, ctx.Err()
	}
}

func (f *fakeAPI) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func newTestRefresher(t *testing.T, f *fakeAPI, awaited *[]uint64, opts RefreshOptions) *NodeRefresher {
	t.Helper()
	var mu sync.Mutex
	r, err := NewNodeRefresher(f.latest, func(_ context.Context, rv uint64) error {
		mu.Lock()
		defer mu.Unlock()
		*awaited = append(*awaited, rv)
		return nil
	}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// refreshAll starts n refreshes of node and returns their results once
// they all end.
func refreshAll(r *NodeRefresher, node string, n int) <-chan []error {
	out := make(chan []error, 1)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = r.Refresh(context.Background(), node) })
	}
	go func() { wg.Wait(); out <- errs }()
	return out
}

func TestRefusalsOfOneNodeShareOneListAndLaterOnesTheNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		var awaited []uint64
		r := newTestRefresher(t, f, &awaited, DefaultRefreshOptions())

		first := refreshAll(r, "node-a", 1)
		synctest.Wait()
		if got := f.callCount(); got != 1 {
			t.Fatalf("a refusal sent %d lists, want 1", got)
		}
		// Refusals that arrive while that list is in flight may concern
		// a pod it did not see: they wait for the next one, all together.
		second := refreshAll(r, "node-a", 7)
		synctest.Wait()
		if got := f.callCount(); got != 1 {
			t.Fatalf("lists while one is in flight: %d, want still 1", got)
		}
		f.release <- struct{}{}
		for _, err := range <-first {
			if err != nil {
				t.Fatalf("first round: %v", err)
			}
		}
		time.Sleep(r.opts.MinInterval) // the pause between two lists of one node
		synctest.Wait()
		if got := f.callCount(); got != 2 {
			t.Fatalf("lists after the first round: %d, want 2 (one for the 7 that arrived meanwhile)", got)
		}
		f.release <- struct{}{}
		for _, err := range <-second {
			if err != nil {
				t.Fatalf("second round: %v", err)
			}
		}
		if gap := f.starts[1].Sub(f.starts[0]); gap < DefaultRefreshOptions().MinInterval {
			t.Errorf("second list %v after the first, want at least MinInterval %v", gap, DefaultRefreshOptions().MinInterval)
		}
		if len(awaited) != 2 || awaited[0] != 42 || awaited[1] != 42 {
			t.Errorf("waited for the pods store at %v, want [42 42] (the version kube-apiserver gave)", awaited)
		}
		drain(r)
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.nodes) != 0 {
			t.Errorf("%d nodes still queued after every refusal was answered", len(r.nodes))
		}
	})
}

// drain lets the refresher's goroutines finish their pause between lists
// and exit, as synctest.Test requires of a bubble before it ends.
func drain(r *NodeRefresher) {
	time.Sleep(r.opts.MinInterval)
	synctest.Wait()
}

func TestNodesRefreshIndependently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		var awaited []uint64
		r := newTestRefresher(t, f, &awaited, DefaultRefreshOptions())
		a := refreshAll(r, "node-a", 1)
		b := refreshAll(r, "node-b", 1)
		synctest.Wait()
		if got := f.callCount(); got != 2 {
			t.Fatalf("two nodes' refusals sent %d lists, want 2 in parallel", got)
		}
		close(f.release)
		<-a
		<-b
		drain(r)
	})
}

func TestRefreshGivesUpAtItsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI() // never released: kube-apiserver does not answer
		var awaited []uint64
		opts := DefaultRefreshOptions()
		r := newTestRefresher(t, f, &awaited, opts)
		start := time.Now()
		err := r.Refresh(context.Background(), "node-a")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("refresh against a silent kube-apiserver: %v, want a deadline error", err)
		}
		if waited := time.Since(start); waited != opts.Timeout {
			t.Errorf("gave up after %v, want Timeout %v", waited, opts.Timeout)
		}
		if len(awaited) != 0 {
			t.Errorf("waited for the store with no version from kube-apiserver")
		}
		drain(r)
	})
}

func TestRefreshesAcrossNodesAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		var awaited []uint64
		opts := DefaultRefreshOptions()
		opts.MaxConcurrent = 1
		r := newTestRefresher(t, f, &awaited, opts)
		a := refreshAll(r, "node-a", 1)
		b := refreshAll(r, "node-b", 1)
		synctest.Wait()
		if got := f.callCount(); got != 1 {
			t.Fatalf("%d lists in flight with one slot, want 1", got)
		}
		time.Sleep(opts.Timeout / 2)
		f.release <- struct{}{}
		synctest.Wait()
		if got := f.callCount(); got != 2 {
			t.Fatalf("%d lists once the slot was free, want 2", got)
		}
		f.release <- struct{}{}
		for _, ch := range []<-chan []error{a, b} {
			if errs := <-ch; errs[0] != nil {
				t.Errorf("refresh: %v", errs[0])
			}
		}
		drain(r)
	})
}

func TestRefreshFindingNoSlotForItsWholeTimeoutGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		f.deaf = true
		var awaited []uint64
		opts := DefaultRefreshOptions()
		opts.MaxConcurrent = 1
		r := newTestRefresher(t, f, &awaited, opts)
		a := refreshAll(r, "node-a", 1)
		synctest.Wait()
		// The round itself: its caller gives up at the same moment.
		if err := r.refresh("node-b"); !errors.Is(err, errTooManyRefreshes) {
			t.Fatalf("node-b with the only slot taken for its whole timeout: %v, want %v", err, errTooManyRefreshes)
		}
		close(f.release)
		<-a
		drain(r)
	})
}

func TestARefusalWaitsAtMostTimeoutEvenBehindALongRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		var awaited []uint64
		opts := DefaultRefreshOptions()
		r := newTestRefresher(t, f, &awaited, opts)
		first := refreshAll(r, "node-a", 1)
		synctest.Wait()
		time.Sleep(opts.Timeout / 2) // the list in flight is slow
		start := time.Now()
		err := r.Refresh(context.Background(), "node-a") // waits for the next round
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("refusal behind a slow round: %v, want a deadline error", err)
		}
		if waited := time.Since(start); waited != opts.Timeout {
			t.Errorf("waited %v, want Timeout %v: its own bound, not the rounds'", waited, opts.Timeout)
		}
		close(f.release)
		<-first
		drain(r)
	})
}

func TestRefresherErrorIsReturnedToEveryWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPI()
		f.err = errors.New("connection refused")
		var awaited []uint64
		r := newTestRefresher(t, f, &awaited, DefaultRefreshOptions())
		errs := refreshAll(r, "node-a", 3)
		synctest.Wait()
		close(f.release)
		for _, err := range <-errs {
			if err == nil || !errors.Is(err, f.err) {
				t.Errorf("waiter got %v, want the list's error", err)
			}
		}
		drain(r)
	})
}

func TestRefreshOptionsAreValidated(t *testing.T) {
	for _, o := range []RefreshOptions{
		{Timeout: 0, MinInterval: 0, MaxConcurrent: 1},
		{Timeout: time.Second, MinInterval: -1, MaxConcurrent: 1},
		{Timeout: time.Second, MinInterval: 0, MaxConcurrent: 0},
	} {
		if _, err := NewNodeRefresher(nil, nil, o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
}

// catchUp is a Refresher that applies a pod the graph had not seen yet,
// as a lagging replica's watch would deliver it once asked to catch up.
type catchUp struct {
	g     *graph.Graph
	pod   *corev1.Pod
	err   error
	calls int
}

func (c *catchUp) Refresh(context.Context, string) error {
	c.calls++
	if c.err != nil {
		return c.err
	}
	if c.pod != nil {
		c.g.AddPod(c.pod)
	}
	return nil
}

// lateSecretPod is a pod of node-a that its graph has not seen yet.
func lateSecretPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "late"},
		Spec: corev1.PodSpec{NodeName: "node-a", Volumes: []corev1.Volume{
			{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "late-secret"}}},
		}},
	}
}

func TestRefusalAGraphLagCausedIsDecidedAgain(t *testing.T) {
	for _, tc := range []struct {
		name        string
		attrs       authorizer.AttributesRecord
		pod         *corev1.Pod
		err         error
		want        authorizer.Decision
		wantRefresh int
	}{
		{name: "secret of a pod the graph had not seen: allowed once caught up",
			attrs: req("get", "", "secrets", "", "ns", "late-secret", ""), pod: lateSecretPod(), want: allow, wantRefresh: 1},
		{name: "the pod itself",
			attrs: req("get", "", "pods", "", "ns", "late", ""), pod: lateSecretPod(), want: allow, wantRefresh: 1},
		{name: "still unrelated after catching up: refused",
			attrs: req("get", "", "secrets", "", "ns", "secret-b", ""), pod: lateSecretPod(), want: noOpinion, wantRefresh: 1},
		{name: "refresh failed: refused, never allowed",
			attrs: req("get", "", "secrets", "", "ns", "late-secret", ""), pod: lateSecretPod(), err: errors.New("kube-apiserver unreachable"), want: noOpinion, wantRefresh: 1},
		{name: "allowed at once: no refresh",
			attrs: req("get", "", "secrets", "", "ns", "secret-a", ""), want: allow, wantRefresh: 0},
		{name: "refused by a rule, not the graph: no refresh",
			attrs: req("create", "", "secrets", "", "ns", "late-secret", ""), pod: lateSecretPod(), want: noOpinion, wantRefresh: 0},
		{name: "no name: no refresh",
			attrs: req("get", "", "secrets", "", "ns", "", ""), pod: lateSecretPod(), want: noOpinion, wantRefresh: 0},
		{name: "attachments are not pod edges: no refresh",
			attrs: req("get", "storage.k8s.io", "volumeattachments", "", "", "va-b", ""), want: noOpinion, wantRefresh: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := fixture(t).graph.(*graph.Graph)
			c := &catchUp{g: g, pod: tc.pod, err: tc.err}
			a := NewRefreshing(g, c)
			d, reason, err := a.Authorize(context.Background(), tc.attrs)
			if err != nil {
				t.Fatalf("Authorize: %v", err)
			}
			if d != tc.want {
				t.Errorf("decision %v (%q), want %v", d, reason, tc.want)
			}
			if d != allow && reason == "" {
				t.Errorf("refusal without a reason")
			}
			if c.calls != tc.wantRefresh {
				t.Errorf("refreshed %d times, want %d", c.calls, tc.wantRefresh)
			}
		})
	}
}
