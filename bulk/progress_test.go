package bulk

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodeproxy/nodeproxy/cache"
)

// scriptedProgress answers each probe with what the test sends on
// answers, and tells the test where each began.
type scriptedProgress struct {
	mu      sync.Mutex
	probes  int
	started chan uint64
	answers chan progressAnswer
}

type progressAnswer struct {
	last, through uint64
	err           error
}

func newScriptedProgress() *scriptedProgress {
	return &scriptedProgress{started: make(chan uint64, 16), answers: make(chan progressAnswer)}
}

func (s *scriptedProgress) Progress(ctx context.Context, _ schema.GroupVersionResource, from uint64) (uint64, uint64, error) {
	s.mu.Lock()
	s.probes++
	s.mu.Unlock()
	s.started <- from
	select {
	case a := <-s.answers:
		return a.last, a.through, a.err
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
}

func (s *scriptedProgress) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.probes
}

// secretsAt is a secrets store whose last change is at rv.
func secretsAt(t *testing.T, rv uint64) *cache.Store {
	t.Helper()
	c, err := cache.NewDetached(cache.Options{LogSize: 16, EncodedEntries: 16})
	if err != nil {
		t.Fatal(err)
	}
	s := c.Store(schema.GroupVersionResource{Version: "v1", Resource: "secrets"})
	if err := s.Replace(nil, strconv.FormatUint(rv, 10)); err != nil {
		t.Fatal(err)
	}
	return s
}

func writeSecretAt(t *testing.T, s *cache.Store, name string, rv uint64) {
	t.Helper()
	obj := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: strconv.FormatUint(rv, 10)}}
	if err := s.Add(obj); err != nil {
		t.Fatal(err)
	}
}

type confirmed struct {
	snap *cache.Snapshot
	how  string
	err  error
}

func confirmAsync(c *ProgressChecker, s *cache.Store, rv uint64, timeout time.Duration) <-chan confirmed {
	out := make(chan confirmed, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		snap, how, err := c.confirm(ctx, s, rv)
		out <- confirmed{snap, how, err}
	}()
	return out
}

// TestProgressProbeServesEveryReadItCovers: reads of a quiet type waiting
// at once share one probe, which starts from the store's version; a
// probe that replayed a change shows the store current only once the
// store holds that change; a read the answer does not cover waits for
// the next probe; a later read the kept answer covers needs none.
func TestProgressProbeServesEveryReadItCovers(t *testing.T) {
	s := secretsAt(t, 10)
	src := newScriptedProgress()
	c := NewProgressChecker(src)

	first := confirmAsync(c, s, 20, 5*time.Second)
	if from := <-src.started; from != 10 {
		t.Fatalf("the probe began at %d, want the store's 10", from)
	}
	second := confirmAsync(c, s, 25, 5*time.Second)
	beyond := confirmAsync(c, s, 40, 5*time.Second)
	time.Sleep(20 * time.Millisecond) // all three wait on the one probe
	if n := src.count(); n != 1 {
		t.Fatalf("%d probes for three reads waiting at once, want 1", n)
	}
	// kube-apiserver replayed a change at 12, then bookmarked 30.
	src.answers <- progressAnswer{last: 12, through: 30}
	select {
	case r := <-first:
		t.Fatalf("a read was answered before the store held the change the probe saw: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	writeSecretAt(t, s, "a", 12)
	for _, ch := range []<-chan confirmed{first, second} {
		r := <-ch
		if r.err != nil || r.how != progressProbe || r.snap.RV != 12 {
			t.Fatalf("read covered by the probe: %+v, want the store at 12, shown by the probe", r)
		}
	}
	// 40 is beyond the answer: another probe, from the store's version
	// when it began (10 or 12: the read at 40 may start it before the
	// store takes in 12).
	if from := <-src.started; from != 10 && from != 12 {
		t.Fatalf("the next probe began at %d, want the store's 10 or 12", from)
	}
	src.answers <- progressAnswer{last: 12, through: 41}
	if r := <-beyond; r.err != nil || r.how != progressProbe {
		t.Fatalf("read at 40: %+v", r)
	}
	if r := <-confirmAsync(c, s, 35, time.Second); r.err != nil || r.how != progressProbe {
		t.Fatalf("a read the kept answer covers: %+v", r)
	}
	if n := src.count(); n != 2 {
		t.Errorf("%d probes, want 2", n)
	}
}

// TestProgressStoreReachingTheVersionNeedsNoProbe: a change that brings
// the store to the read's version ends the wait, whatever the probe.
func TestProgressStoreReachingTheVersionNeedsNoProbe(t *testing.T) {
	s := secretsAt(t, 10)
	src := newScriptedProgress()
	c := NewProgressChecker(src)
	read := confirmAsync(c, s, 20, 5*time.Second)
	<-src.started
	writeSecretAt(t, s, "a", 21)
	if r := <-read; r.err != nil || r.how != progressStore || r.snap.RV != 21 {
		t.Fatalf("%+v, want the store's own 21", r)
	}
	src.answers <- progressAnswer{last: 10, through: 15}
}

// TestProgressProbeFailureIsNoProof: a failed probe fails the reads that
// waited for it (they then wait for the store alone), and reads arriving
// just after are failed without a probe, so that a kube-apiserver that
// refuses probes is not asked once a read.
func TestProgressProbeFailureIsNoProof(t *testing.T) {
	s := secretsAt(t, 10)
	src := newScriptedProgress()
	c := NewProgressChecker(src)
	read := confirmAsync(c, s, 20, 5*time.Second)
	<-src.started
	src.answers <- progressAnswer{err: errors.New("410: too old resource version")}
	if r := <-read; r.err == nil {
		t.Fatalf("%+v, want the probe's error", r)
	}
	if r := <-confirmAsync(c, s, 20, 5*time.Second); r.err == nil {
		t.Fatalf("%+v, want the last probe's error without a probe", r)
	}
	if n := src.count(); n != 1 {
		t.Errorf("%d probes, want 1", n)
	}
}

// TestProgressAnswerBeforeItsStartIsRefused: a probe that claims a last
// change older than where it began is a broken answer, not a proof.
func TestProgressAnswerBeforeItsStartIsRefused(t *testing.T) {
	s := secretsAt(t, 10)
	src := newScriptedProgress()
	c := NewProgressChecker(src)
	read := confirmAsync(c, s, 20, 5*time.Second)
	<-src.started
	src.answers <- progressAnswer{last: 5, through: 30}
	if r := <-read; r.err == nil {
		t.Fatalf("%+v, want an error", r)
	}
}

// TestProgressWaitEndsWithTheRequest: a read whose request ends stops
// waiting.
func TestProgressWaitEndsWithTheRequest(t *testing.T) {
	s := secretsAt(t, 10)
	src := newScriptedProgress()
	c := NewProgressChecker(src)
	read := confirmAsync(c, s, 20, 50*time.Millisecond)
	<-src.started
	if r := <-read; !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("%+v, want the request's end", r)
	}
	src.answers <- progressAnswer{last: 10, through: 30}
}

// TestProgressProbesArePipelinedWhileReadsWait: a read that waits longer
// than progressSpacing for the probe in flight starts another, so that
// one is due at each of kube-apiserver's bookmark ticks; never more than
// progressMaxInFlight at once; the first answer that covers it serves it.
func TestProgressProbesArePipelinedWhileReadsWait(t *testing.T) {
	s := secretsAt(t, 10)
	src := newScriptedProgress()
	c := NewProgressChecker(src)
	read := confirmAsync(c, s, 20, 10*time.Second)
	for range progressMaxInFlight {
		select {
		case <-src.started:
		case <-time.After(5 * time.Second):
			t.Fatalf("%d probes in flight, want %d while the read waits", src.count(), progressMaxInFlight)
		}
	}
	select {
	case <-src.started:
		t.Fatalf("more than %d probes in flight", progressMaxInFlight)
	case <-time.After(2 * progressSpacing):
	}
	src.answers <- progressAnswer{last: 10, through: 19} // does not cover 20
	src.answers <- progressAnswer{last: 10, through: 20}
	if r := <-read; r.err != nil || r.how != progressProbe {
		t.Fatalf("%+v", r)
	}
	for range progressMaxInFlight - 2 {
		src.answers <- progressAnswer{last: 10, through: 20}
	}
}

// TestUnsyncedStoreIsNeverProbed: a store whose first list is not in has
// no version to probe from, and a probe from "0" (kube-apiserver's
// synthetic ADDED events in key order) proves nothing: confirm refuses
// at once, and neither it nor prime opens a probe.
func TestUnsyncedStoreIsNeverProbed(t *testing.T) {
	c, err := cache.NewDetached(cache.Options{LogSize: 16, EncodedEntries: 16})
	if err != nil {
		t.Fatal(err)
	}
	s := c.Store(schema.GroupVersionResource{Version: "v1", Resource: "secrets"})
	source := newScriptedProgress()
	checker := NewProgressChecker(source)
	checker.prime(s)
	if _, _, err := checker.confirm(context.Background(), s, 100); !errors.Is(err, ErrUnsynced) {
		t.Fatalf("confirm of an unsynced store: %v, want ErrUnsynced", err)
	}
	if n := source.count(); n != 0 {
		t.Fatalf("%d probes of an unsynced store, want none", n)
	}
}
