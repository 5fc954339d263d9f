package cache

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAFollowerWithinTheLogIsNeverExpired: a reader that follows the
// store as a bulk watch dispatcher does (snapshot, changes since its
// position, move on) and never falls more than half the log behind (the
// writer waits for it) must never get ErrExpired, however busy the
// writer is while it reads.
func TestAFollowerWithinTheLogIsNeverExpired(t *testing.T) {
	const size = 64
	s := newStore(served[1], size)
	if err := s.Replace(nil, "1"); err != nil {
		t.Fatal(err)
	}
	var readerAt atomic.Uint64
	readerAt.Store(1)
	done := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		snap := s.Snapshot()
		pos := snap.RV
		readerAt.Store(pos)
		for {
			select {
			case <-done:
				return
			case <-snap.Next():
			}
			snap = s.Snapshot()
			_, err := snap.Changes(pos)
			if err != nil {
				errs <- err
				return
			}
			pos = snap.RV
			readerAt.Store(pos)
		}
	}()
	for rv := uint64(2); rv < 100000; rv++ {
		for rv-readerAt.Load() > size/2 {
			time.Sleep(time.Microsecond)
			select {
			case err := <-errs:
				t.Fatalf("at %d, reader at %d: %v", rv, readerAt.Load(), err)
			default:
			}
		}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "s" + strconv.Itoa(int(rv%7)), ResourceVersion: strconv.FormatUint(rv, 10)}}
		if err := s.Update(secret); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}
