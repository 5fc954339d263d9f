package nodeview

import (
	"context"
	"testing"
	"time"

	"k8s.io/component-base/metrics/testutil"

	"github.com/nodeproxy/nodeproxy/bulk"
	"github.com/nodeproxy/nodeproxy/cache"
)

// TestQuietViewAnswersAProgressRequest: nothing changed since the last
// bookmark, and the answer still comes, at the same position.
func TestQuietViewAnswersAProgressRequest(t *testing.T) {
	r := newReplica(t, 256)
	c := r.open("n1", nil)
	expect(t, "empty view", step(r, c), "BOOKMARK initial-events-end")
	before := c.pos
	expect(t, "a step with nothing asked", step(r, c))
	r.views.requestProgress(c.view, "t1")
	expect(t, "a step after the request", step(r, c), "BOOKMARK progress=t1")
	if c.pos != before {
		t.Errorf("the answer's position is %s, want the quiet view's %s", c.pos, before)
	}
	expect(t, "the step after", step(r, c))
}

// TestProgressRequestGetsTheChangeBeforeItsAnswer: a change the store
// published before the request, not yet stepped, comes before the
// answer, in the batch the answer closes; a view not asking gets its
// usual bookmark, without the token.
func TestProgressRequestGetsTheChangeBeforeItsAnswer(t *testing.T) {
	r := newReplica(t, 256)
	var k cluster
	c := r.open("n1", nil)
	other := r.open("n2", nil)
	step(r, c, k.put(secretsGVR, secret("s1", "a")), k.put(podsGVR, pod("p1", "n1", "secret/s1")))
	other.read()
	r.write(k.put(secretsGVR, secret("s1", "b")))
	r.write(k.put(servicesGVR, service("web")))
	r.views.requestProgress(c.view, "t1")
	expect(t, "the asking view", step(r, c), "MODIFIED Secret ns/s1", "ADDED Service default/web", "BOOKMARK progress=t1")
	expect(t, "the other view", other.read(), "ADDED Service default/web", "BOOKMARK")
	if c.pos != other.pos {
		t.Errorf("the answer is at %s, the step's bookmark at %s", c.pos, other.pos)
	}
}

// TestProgressRequestsAreAnsweredInOrder: requests pending together are
// answered by one bookmark with the latest token; a later one by its
// own; a request of a view that closes is dropped.
func TestProgressRequestsAreAnsweredInOrder(t *testing.T) {
	r := newReplica(t, 256)
	var k cluster
	c := r.open("n1", nil)
	step(r, c)
	r.views.requestProgress(c.view, "t1")
	r.write(k.put(servicesGVR, service("web")))
	r.views.requestProgress(c.view, "t2")
	expect(t, "two requests, one step", step(r, c), "ADDED Service default/web", "BOOKMARK progress=t2")
	r.views.requestProgress(c.view, "t3")
	expect(t, "a third", step(r, c), "BOOKMARK progress=t3")

	r.views.requestProgress(c.view, "t4")
	c.sink.Close(nil)
	expect(t, "the view closed", step(r, c))
	if len(c.view.progress) != 0 {
		t.Errorf("a closed view keeps %d requests", len(c.view.progress))
	}
}

// TestProgressWaitsForAHeldPod: a pod change held back for what it uses
// keeps the view's position short of the pods' store, and the answer
// waits with it: its position must be past everything the cache held.
func TestProgressWaitsForAHeldPod(t *testing.T) {
	r := newReplica(t, 256)
	now := time.Unix(1000, 0)
	r.views.now = func() time.Time { return now }
	var k cluster
	c := r.open("n1", nil)
	step(r, c)
	s, p := k.put(secretsGVR, secret("s", "a")), k.put(podsGVR, pod("p", "n1", "secret/s"))
	r.write(p)
	r.views.requestProgress(c.view, "t1")
	expect(t, "the pod held, its secret on its way", step(r, c))
	expect(t, "the secret arrives", step(r, c, s), "ENTERED Secret ns/s", "ADDED Pod ns/p", "BOOKMARK progress=t1")
}

// TestJoiningViewAnswersAfterItsInitialState: a request made before the
// view joined is answered after the initial state's bookmark, and after
// a resume's changes.
func TestJoiningViewAnswersAfterItsInitialState(t *testing.T) {
	r := newReplica(t, 256)
	var k cluster
	r.write(k.put(servicesGVR, service("web")))
	c := r.open("n1", nil)
	r.views.requestProgress(c.view, "t1")
	expect(t, "initial state", step(r, c), "ADDED Service default/web", "BOOKMARK initial-events-end", "BOOKMARK progress=t1")

	from := c.position()
	r.write(k.put(servicesGVR, service("db")))
	step(r, c)
	resumed := r.open("n1", &from)
	r.views.requestProgress(resumed.view, "t2")
	r.views.Step()
	expect(t, "resumed", resumed.read(), "ADDED Service default/db", "BOOKMARK progress=t2")
	if resumed.pos != c.pos {
		t.Errorf("the resumed view's answer is at %s, the other view at %s", resumed.pos, c.pos)
	}
}

// staleFreshness shows every store fresh at its current version but
// those of the types in stale, which it cannot show fresh (504).
type staleFreshness struct{ stale map[string]bool }

func (f staleFreshness) FreshVersion(_ context.Context, s *cache.Store, _ time.Time, _ time.Duration) (uint64, error) {
	if f.stale[s.Resource.Resource] {
		return 0, bulk.TooLargeResourceVersion(s.Snapshot().RV+1, s.Snapshot().RV)
	}
	return s.Snapshot().RV, nil
}

// awaitProved waits until no progress request of r is being shown fresh.
func awaitProved(t *testing.T, r *replica) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.views.proving.mu.Lock()
		n := len(r.views.proving.queue)
		r.views.proving.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d progress requests still being shown fresh after 30 s", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestProgressRequestNotShownFreshGetsNoAnswer: a request whose types
// cannot all be shown as fresh as kube-apiserver gets no bookmark (the
// consumer reads elsewhere), and is counted; the next one, shown fresh,
// is answered with its own token.
func TestProgressRequestNotShownFreshGetsNoAnswer(t *testing.T) {
	r := newReplica(t, 256)
	fresh := staleFreshness{stale: map[string]bool{"services": true}}
	r.views.ProveFreshness(fresh, 0)
	c := r.open("n1", nil)
	step(r, c)
	refusals := func() float64 {
		t.Helper()
		v, err := testutil.GetCounterMetricValue(progressRefusals.WithLabelValues("services", refusedStale))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := refusals()
	r.views.requestProgress(c.view, "t1")
	awaitProved(t, r)
	expect(t, "a step after a stale request", step(r, c))
	if got := refusals() - before; got != 1 {
		t.Errorf("%v refusals counted for services, want 1", got)
	}
	delete(fresh.stale, "services")
	r.views.requestProgress(c.view, "t2")
	awaitProved(t, r)
	expect(t, "a step after a fresh request", step(r, c), "BOOKMARK progress=t2")
}
