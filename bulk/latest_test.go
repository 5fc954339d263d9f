package bulk

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// scriptedVersions hands each question to the test (started), which
// answers it on the question's own channel, and counts the questions.
type scriptedVersions struct {
	mu      sync.Mutex
	asked   int
	started chan chan answer
}

type answer struct {
	rv  uint64
	err error
}

func newScriptedVersions() *scriptedVersions {
	return &scriptedVersions{started: make(chan chan answer, 64)}
}

func (s *scriptedVersions) LatestVersion(ctx context.Context, _ schema.GroupVersionResource) (uint64, error) {
	s.mu.Lock()
	s.asked++
	s.mu.Unlock()
	reply := make(chan answer, 1)
	s.started <- reply
	select {
	case a := <-reply:
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

// TestLatestCheckerAsksOnceForManyWaiters: waiters that arrive while a
// question is out share the next one, sent latestSpacing after it whether
// or not it has come back, and do not take its answer (which may predate
// their version); a version at or below an answer already seen needs no
// question; an error reaches the waiters of that question.
func TestLatestCheckerAsksOnceForManyWaiters(t *testing.T) {
	src := newScriptedVersions()
	c := NewLatestChecker(src)
	// Long enough for the 50 to join the next question on a loaded machine.
	c.spacing = time.Second
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
	q1 := <-src.started
	var later []<-chan verdict
	for range 50 {
		later = append(later, ask(20))
	}
	waitUntil(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		next := c.byType[secrets].next
		return next != nil && next.waiters == len(later)
	})
	q2 := <-src.started  // sent while q1 is still out
	q1 <- answer{rv: 15} // too low for the later waiters, who must not take it
	if v := <-first; !v.reached || v.err != nil {
		t.Fatalf("first waiter: %+v, want reached", v)
	}
	q2 <- answer{rv: 25}
	for i, ch := range later {
		v := <-ch
		if v.err != nil {
			t.Fatalf("later waiter %d: %+v", i, v)
		}
		if !v.reached {
			t.Fatalf("later waiter %d: not reached, want reached from q2's answer", i)
		}
	}
	if n := src.questions(); n != 2 {
		t.Errorf("%d questions for 51 waiters, want 2", n)
	}
	asked := src.questions()
	if v := <-ask(25); !v.reached || v.err != nil {
		t.Errorf("a version already answered for: %+v", v)
	}
	if n := src.questions(); n != asked {
		t.Errorf("a version already answered for asked again: %d questions", n-asked)
	}

	future := ask(1000)
	(<-src.started) <- answer{rv: 30}
	if v := <-future; v.reached || v.err != nil {
		t.Errorf("a version kube-apiserver has not reached: %+v", v)
	}

	unreachable := ask(1000)
	(<-src.started) <- answer{err: errors.New("connection refused")}
	if v := <-unreachable; v.err == nil {
		t.Errorf("kube-apiserver unreachable: %+v, want the error", v)
	}
}

// TestLatestQuestionsAreBoundedInFlight: a kube-apiserver that does not
// answer holds at most latestMaxInFlight questions of a type; the next is
// sent when one ends.
func TestLatestQuestionsAreBoundedInFlight(t *testing.T) {
	src := newScriptedVersions()
	c := NewLatestChecker(src)
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	var out []chan error
	var replies []chan answer
	for range latestMaxInFlight + 1 {
		done := make(chan error, 1)
		out = append(out, done)
		go func() {
			_, err := c.current(context.Background(), secrets)
			done <- err
		}()
		if len(replies) < latestMaxInFlight {
			replies = append(replies, <-src.started)
		}
	}
	select {
	case <-src.started:
		t.Fatalf("more than %d questions out", latestMaxInFlight)
	case <-time.After(3 * latestSpacing):
	}
	replies[0] <- answer{rv: 1}
	last := <-src.started // sent once the first ended
	last <- answer{rv: 2}
	for _, r := range replies[1:] {
		r <- answer{rv: 2}
	}
	for i, ch := range out {
		if err := <-ch; err != nil {
			t.Fatalf("waiter %d: %v", i, err)
		}
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
// shortcut), not one to a question already sent when it arrived (both
// may predate a change the client was shown elsewhere).
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
	(<-src.started) <- answer{rv: 10}
	if a := <-first; a.rv != 10 || a.err != nil {
		t.Fatalf("first read: %+v", a)
	}
	again := current() // 10 is known: a resume at 10 would not ask; this does
	q2 := <-src.started
	inFlight := current() // arrives while the second question is out
	q3 := <-src.started
	q2 <- answer{rv: 11}
	if a := <-again; a.rv != 11 {
		t.Fatalf("second read: %+v, want the answer to its own question", a)
	}
	select {
	case a := <-inFlight:
		t.Fatalf("a read that arrived while a question was out took its answer: %+v", a)
	case <-time.After(50 * time.Millisecond):
	}
	q3 <- answer{rv: 12}
	if a := <-inFlight; a.rv != 12 {
		t.Fatalf("a read that arrived while a question was out got %+v, want the next answer", a)
	}
	if n := src.questions(); n != 3 {
		t.Errorf("%d questions, want 3", n)
	}
}
