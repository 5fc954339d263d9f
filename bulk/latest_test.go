package bulk

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// scriptedVersions answers each question with what the test sends on
// answers, and counts the questions.
type scriptedVersions struct {
	mu      sync.Mutex
	asked   int
	started chan struct{}
	answers chan answer
}

type answer struct {
	rv  uint64
	err error
}

func newScriptedVersions() *scriptedVersions {
	return &scriptedVersions{started: make(chan struct{}, 16), answers: make(chan answer)}
}

func (s *scriptedVersions) LatestVersion(ctx context.Context, _ schema.GroupVersionResource) (uint64, error) {
	s.mu.Lock()
	s.asked++
	s.mu.Unlock()
	s.started <- struct{}{}
	select {
	case a := <-s.answers:
		return a.rv, a.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (s *scriptedVersions) questions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked
}

type verdict struct {
	reached bool
	err     error
}

// TestLatestCheckerAsksOnceForManyWaiters: one question in flight per
// type; waiters that arrive while it is in flight share one queued
// question and do not take the earlier answer (which may predate their
// version); a version at or below an answer already seen needs no
// question; an error reaches the waiters of that question.
func TestLatestCheckerAsksOnceForManyWaiters(t *testing.T) {
	src := newScriptedVersions()
	c := NewLatestChecker(src)
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	ask := func(rv uint64) <-chan verdict {
		out := make(chan verdict, 1)
		go func() {
			reached, err := c.reached(context.Background(), secrets, rv)
			out <- verdict{reached, err}
		}()
		return out
	}

	first := ask(10)
	<-src.started // question 1 in flight
	var later []<-chan verdict
	for range 50 {
		later = append(later, ask(20))
	}
	waitUntil(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		w := c.byType[secrets].waiting
		return w != nil && w.waiters == len(later)
	})
	src.answers <- answer{rv: 15} // too low for the later waiters, who must not take it
	if v := <-first; !v.reached || v.err != nil {
		t.Fatalf("first waiter: %+v, want reached", v)
	}
	<-src.started // question 2, shared by all 50
	src.answers <- answer{rv: 25}
	for i, ch := range later {
		if v := <-ch; !v.reached || v.err != nil {
			t.Fatalf("later waiter %d: %+v, want reached from the second answer", i, v)
		}
	}
	if n := src.questions(); n != 2 {
		t.Errorf("%d questions for 51 waiters, want 2", n)
	}

	if v := <-ask(25); !v.reached || v.err != nil {
		t.Errorf("a version already answered for: %+v", v)
	}
	if n := src.questions(); n != 2 {
		t.Errorf("a version already answered for asked again: %d questions", n)
	}

	future := ask(1000)
	<-src.started
	src.answers <- answer{rv: 30}
	if v := <-future; v.reached || v.err != nil {
		t.Errorf("a version kube-apiserver has not reached: %+v", v)
	}

	unreachable := ask(1000)
	<-src.started
	src.answers <- answer{err: errors.New("connection refused")}
	if v := <-unreachable; v.err == nil {
		t.Errorf("kube-apiserver unreachable: %+v, want the error", v)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition never met")
}

// TestConsistentVersionIsAskedAfterTheRead: a consistent read never takes
// an answer it did not wait for: not the highest answer seen (a resume's
// shortcut), not one to a question already in flight when it arrived
// (both may predate a change the client was shown elsewhere).
func TestConsistentVersionIsAskedAfterTheRead(t *testing.T) {
	src := newScriptedVersions()
	c := NewLatestChecker(src)
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	current := func() <-chan answer {
		out := make(chan answer, 1)
		go func() {
			rv, err := c.current(context.Background(), secrets)
			out <- answer{rv, err}
		}()
		return out
	}

	first := current()
	<-src.started
	src.answers <- answer{rv: 10}
	if a := <-first; a.rv != 10 || a.err != nil {
		t.Fatalf("first read: %+v", a)
	}
	again := current() // 10 is known: a resume at 10 would not ask; this does
	<-src.started
	inFlight := current() // arrives while the second question is in flight
	waitUntil(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.byType[secrets].waiting != nil
	})
	src.answers <- answer{rv: 11}
	if a := <-again; a.rv != 11 {
		t.Fatalf("second read: %+v, want the answer to its own question", a)
	}
	<-src.started
	src.answers <- answer{rv: 12}
	if a := <-inFlight; a.rv != 12 {
		t.Fatalf("a read that arrived while a question was in flight got %+v, want the next answer", a)
	}
	if n := src.questions(); n != 3 {
		t.Errorf("%d questions, want 3", n)
	}
}
