package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// failoverWatchers are the clients of a failover run: one Session per
// connection, one channel per secret, and what each channel received.
type failoverWatchers struct {
	sessions []*watchmux.Session
	logs     []*channelLog // by secret
	readers  sync.WaitGroup

	mu          sync.Mutex
	stepAt      time.Time // when the replica the resumes follow went
	resumeTimes []time.Duration
	resumed     int
	lostInitial int
}

// channelLog is what one channel received.
type channelLog struct {
	mu      sync.Mutex
	initial bool     // the initial ADDED came
	rvs     []uint64 // resourceVersions of the events after it
	max     uint64
	final   *metav1.Status // the ERROR that ended it
	// relists are the lists after the first (follow with relist), and
	// listed the resourceVersions their items had.
	relists int
	listed  []uint64
}

func newFailoverWatchers(n int) *failoverWatchers {
	w := &failoverWatchers{logs: make([]*channelLog, n)}
	for i := range w.logs {
		w.logs[i] = &channelLog{}
	}
	return w
}

// open dials load.Conns sessions to cfg and opens load.Channels channels
// on each, one secret each, from the current state.
func (w *failoverWatchers) open(ctx context.Context, env *Env, cfg *rest.Config, load FailoverLoad, names []string) error {
	bar := env.phase(len(names), "failover: opening %d channels on %d connections", len(names), load.Conns)
	defer bar.Done()
	for range load.Conns {
		s, err := watchmux.NewSession(ctx, cfg, watchmux.WithResumeObserver(w.observe))
		if err != nil {
			return fmt.Errorf("dial: %w", err)
		}
		w.sessions = append(w.sessions, s)
	}
	errs := make(chan error, load.Conns)
	var wg sync.WaitGroup
	for c, s := range w.sessions {
		wg.Go(func() {
			for j := range load.Channels {
				i := c*load.Channels + j
				ch, err := s.Watch(ctx, v1alpha1.GetOperation{
					Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "secrets"},
					Namespace: failoverNamespace,
					Options:   metav1.ListOptions{FieldSelector: "metadata.name=" + names[i]},
				})
				if err != nil {
					errs <- fmt.Errorf("open the channel of %s: %w", names[i], err)
					return
				}
				w.readers.Go(func() { w.logs[i].read(ch) })
				bar.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	// Every channel has its initial event before the writes start, so
	// that every write is one it must receive.
	for i, l := range w.logs {
		for !l.hasInitial() {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if l.ended() {
				return fmt.Errorf("the channel of %s ended before its initial event: %v", names[i], l.final)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

func (w *failoverWatchers) close() {
	for _, s := range w.sessions {
		_ = s.Close()
	}
	w.readers.Wait()
}

// stepStarted notes when a replica went: the resumes after it are timed
// from then.
func (w *failoverWatchers) stepStarted(at time.Time) {
	w.mu.Lock()
	w.stepAt = at
	w.mu.Unlock()
}

func (w *failoverWatchers) observe(r watchmux.Resume) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch r.Outcome {
	case watchmux.ResumeReopened:
		w.resumed++
		w.resumeTimes = append(w.resumeTimes, r.Reopened.Sub(w.stepAt))
	case watchmux.ResumeLostInitial:
		w.lostInitial++
	}
}

func (l *channelLog) read(ch *watchmux.SessionChannel) {
	for ev := range ch.Events {
		l.mu.Lock()
		if ev.Type == watch.Error {
			l.final = ev.Status
		} else if !l.initial {
			l.initial = true
		} else {
			rv := eventRV(ev.Object)
			l.rvs = append(l.rvs, rv)
			l.max = max(l.max, rv)
		}
		l.mu.Unlock()
	}
}

func (l *channelLog) hasInitial() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.initial
}

func (l *channelLog) ended() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.final != nil
}

// repeats reads the log's events, its lock held: the resourceVersions
// seen, how many came again, and how many of the others were not
// expected.
func (l *channelLog) repeats(expected func(rv uint64) bool) (seen map[uint64]bool, repeated, unexpected int) {
	seen = map[uint64]bool{}
	for _, rv := range l.rvs {
		switch {
		case seen[rv]:
			repeated++
		case !expected(rv):
			unexpected++
		}
		seen[rv] = true
	}
	return seen, repeated, unexpected
}

// eventRV reads an event object's resourceVersion; 0 if it has none.
func eventRV(raw json.RawMessage) uint64 {
	var m struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return 0
	}
	rv, _ := strconv.ParseUint(m.Metadata.ResourceVersion, 10, 64)
	return rv
}

// waitDelivered waits until every channel still open has received its
// secret's last write, or timeout.
func (w *failoverWatchers) waitDelivered(ctx context.Context, wr *failoverWriter, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for i := 0; i < len(w.logs) && time.Now().Before(deadline) && ctx.Err() == nil; {
		l := w.logs[i]
		l.mu.Lock()
		done := l.final != nil || l.max >= wr.last(i)
		l.mu.Unlock()
		if done {
			i++
			continue
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// compare counts, per channel, the writes it missed and the events it
// got twice (or that were never written), by resourceVersion. A channel
// that ended with an ERROR owes only the writes up to the last event it
// received: its consumer relists.
func (w *failoverWatchers) compare(wr *failoverWriter) *failoverOutcome {
	w.mu.Lock()
	o := &failoverOutcome{channels: len(w.logs), resumed: w.resumed, lostInitial: w.lostInitial, resumeTimes: slices.Clone(w.resumeTimes)}
	w.mu.Unlock()
	for i, l := range w.logs {
		written := wr.written(i)
		o.writes += len(written)
		l.mu.Lock()
		cutoff := ^uint64(0)
		if l.final != nil {
			cutoff = l.max
			if l.final.Code == http.StatusGone {
				o.expired++
			} else {
				o.otherErrors++
			}
		}
		seen, duplicated, strange := l.repeats(func(rv uint64) bool { return written[rv] })
		o.duplicated += duplicated
		o.strange += strange
		for rv := range written {
			if rv <= cutoff && !seen[rv] {
				o.lost++
			}
		}
		l.mu.Unlock()
	}
	return o
}
