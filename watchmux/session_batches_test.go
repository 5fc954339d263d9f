package watchmux

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// batchLog is a history of batches, each closed by a bookmark "b<i>", as
// a node view sends them; two replicas share it.
type batchLog struct {
	mu      sync.Mutex
	batches [][]string
	subs    map[Sink]struct{}
}

func batchObject(name string) []byte {
	return fmt.Appendf(nil, `{"metadata":{"name":%q,"resourceVersion":"1"}}`, name)
}

func (l *batchLog) sendLocked(s Sink, i int, initial bool) {
	send := s.Send
	if initial {
		send = s.Initial
	}
	for _, name := range l.batches[i] {
		send(watch.Added, batchObject(name))
	}
	send(watch.Bookmark, fmt.Appendf(nil, `{"metadata":{"resourceVersion":"b%d"}}`, i))
}

// write appends a batch and sends its first sent events to every channel
// following, and its bookmark only if that is all of them.
func (l *batchLog) write(sent int, names ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.batches = append(l.batches, names)
	for s := range l.subs {
		if sent >= len(names) {
			l.sendLocked(s, len(l.batches)-1, false)
			continue
		}
		for _, name := range names[:sent] {
			s.Send(watch.Added, batchObject(name))
		}
	}
}

type batchReplica struct{ log *batchLog }

func (r *batchReplica) Open(_ context.Context, sel *v1alpha1.GetOperation, sink Sink) (func(), *metav1.Status) {
	return func() {
		l := r.log
		l.mu.Lock()
		defer l.mu.Unlock()
		if rv := sel.Options.ResourceVersion; rv == "" {
			l.sendLocked(sink, 0, true)
		} else {
			var from int
			_, _ = fmt.Sscanf(rv, "b%d", &from)
			for i := from + 1; i < len(l.batches); i++ {
				l.sendLocked(sink, i, false)
			}
		}
		l.subs[sink] = struct{}{}
		sink.OnClose(func() {
			l.mu.Lock()
			delete(l.subs, sink)
			l.mu.Unlock()
		})
	}, nil
}

// TestSessionBatchesResumeFromTheirBookmark: a connection lost in the
// middle of a batch loses and repeats nothing; the consumer gets each
// batch whole, then its bookmark, and never the half sent before the
// loss.
func TestSessionBatchesResumeFromTheirBookmark(t *testing.T) {
	log := &batchLog{subs: map[Sink]struct{}{}, batches: [][]string{{"initial"}}}
	_, hsA := startReplica(t, &batchReplica{log: log})
	_, hsB := startReplica(t, &batchReplica{log: log})
	fwd, cfg := behindForwarder(t, hsA)
	s, err := NewSession(context.Background(), cfg, WithKeepalive(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ch, err := s.WatchBatches(context.Background(), sel("views"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	read := func(n int) {
		t.Helper()
		for range n {
			ev := nextSession(t, ch)
			var m meta
			var o struct {
				Metadata struct{ Name string } `json:"metadata"`
			}
			if err := json.Unmarshal(ev.Object, &m); err != nil {
				t.Fatal(err)
			}
			_ = json.Unmarshal(ev.Object, &o)
			if ev.Type == watch.Bookmark {
				got = append(got, "@"+m.Metadata.ResourceVersion)
			} else {
				got = append(got, o.Metadata.Name)
			}
		}
	}
	read(2)
	waitFollowed(t, &log.mu, func() int { return len(log.subs) })
	log.write(2, "x1", "x2")
	read(3)
	fwd.Add(hsB.Listener.Addr().String())
	log.write(1, "y1", "y2") // the connection sends y1 alone, then goes
	time.Sleep(50 * time.Millisecond)
	fwd.Remove(hsA.Listener.Addr().String())
	fwd.Cut(hsA.Listener.Addr().String())
	read(3)
	want := "initial @b0 x1 x2 @b1 y1 y2 @b2"
	if strings.Join(got, " ") != want {
		t.Fatalf("the consumer got %q, want %q", strings.Join(got, " "), want)
	}
}
