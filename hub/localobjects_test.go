package hub

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeproxy/nodeproxy/cache"
)

// TestCachedObjectsAnswerOnlyFromFreshTypes: the local check reads a
// type's objects only once its store has listed and heard from
// kube-apiserver within the bound; a type not listed yet, one heard
// from too long ago, or a bound of 0 is stale, and an object a fresh
// store does not hold is missing, not refused.
func TestCachedObjectsAnswerOnlyFromFreshTypes(t *testing.T) {
	objects, err := cache.NewDetached(cache.Options{LogSize: 16, EncodedEntries: 16})
	if err != nil {
		t.Fatal(err)
	}
	pods := objects.Store(corev1.SchemeGroupVersion.WithResource("pods"))
	c := newCachedObjects(objects, time.Minute, nil)

	if _, got := c.lookup("pods", "kube-system", "kube-proxy-a"); got != lookupStale {
		t.Errorf("before the first list: %v, want stale", got)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy-a", UID: "pod-1", ResourceVersion: "5"}}
	if err := pods.Replace([]interface{}{pod}, "5"); err != nil {
		t.Fatal(err)
	}
	if o, got := c.lookup("pods", "kube-system", "kube-proxy-a"); got != lookupFound || o.GetUID() != "pod-1" {
		t.Errorf("listed: %v %v, want pod-1", o, got)
	}
	if _, got := c.lookup("pods", "kube-system", "kube-proxy-b"); got != lookupMissing {
		t.Errorf("another pod: %v, want missing", got)
	}
	if _, got := c.lookup("serviceaccounts", "kube-system", "kube-proxy"); got != lookupStale {
		t.Errorf("serviceaccounts, never listed: %v, want stale", got)
	}
	c.now = func() time.Time { return time.Now().Add(2 * time.Minute) }
	if _, got := c.lookup("pods", "kube-system", "kube-proxy-a"); got != lookupStale {
		t.Errorf("not heard from for 2 minutes: %v, want stale", got)
	}
	if _, got := newCachedObjects(objects, 0, nil).lookup("pods", "kube-system", "kube-proxy-a"); got != lookupStale {
		t.Errorf("bound 0: %v, want stale", got)
	}
}

// proofs is a freshness that counts what it is asked, and answers err.
type proofs struct {
	asked atomic.Int32
	err   error
	hold  chan struct{} // closed to let the proofs answer
}

func (p *proofs) FreshVersion(_ context.Context, s *cache.Store, _ time.Time, _ time.Duration) (uint64, error) {
	p.asked.Add(1)
	<-p.hold
	return s.Snapshot().RV, p.err
}

// TestAQuietTypeIsShownFreshOnceForEveryCheck: a type whose store has
// heard nothing within the bound (quiet, not failing) is shown fresh by
// one proof that every check waiting on it shares, and then trusted for
// the bound after the proof, as after a bookmark; a proof that fails
// leaves it stale, and the checks are reviews.
func TestAQuietTypeIsShownFreshOnceForEveryCheck(t *testing.T) {
	objects, err := cache.NewDetached(cache.Options{LogSize: 16, EncodedEntries: 16})
	if err != nil {
		t.Fatal(err)
	}
	pods := objects.Store(corev1.SchemeGroupVersion.WithResource("pods"))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy-a", UID: "pod-1", ResourceVersion: "5"}}
	if err := pods.Replace([]interface{}{pod}, "5"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
		want lookupResult
	}{
		{"shown fresh", nil, lookupFound},
		{"not shown fresh", errors.New("kube-apiserver did not answer"), lookupStale},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &proofs{err: tc.err, hold: make(chan struct{})}
			c := newCachedObjects(objects, time.Minute, p)
			later := time.Now().Add(2 * time.Minute) // past the last news
			c.now = func() time.Time { return later }
			var wg sync.WaitGroup
			results := make([]lookupResult, 50)
			for i := range results {
				wg.Go(func() { _, results[i] = c.lookup("pods", "kube-system", "kube-proxy-a") })
			}
			for p.asked.Load() == 0 {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond) // the other checks join the proof
			close(p.hold)
			wg.Wait()
			for i, got := range results {
				if got != tc.want {
					t.Fatalf("check %d: %v, want %v", i, got, tc.want)
				}
			}
			if tc.err == nil {
				// Trusted for the bound after the proof, then asked again.
				c.now = func() time.Time { return later.Add(59 * time.Second) }
				c.lookup("pods", "kube-system", "kube-proxy-a")
				if n := p.asked.Load(); n != 1 {
					t.Errorf("%d proofs within the bound, want 1", n)
				}
				c.now = func() time.Time { return later.Add(61 * time.Second) }
				c.lookup("pods", "kube-system", "kube-proxy-a")
				if n := p.asked.Load(); n != 2 {
					t.Errorf("%d proofs past the bound, want 2", n)
				}
			}
		})
	}
}
