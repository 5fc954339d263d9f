package watchmux

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/forwarder"
)

// changeLog is the history two fake replicas share, as two hubs share
// etcd's: change n has resourceVersion n. Pure logic stands in for the
// hub here; test/bench's failover tests run the real one.
type changeLog struct {
	mu   sync.Mutex
	last int
	subs map[Sink]struct{}
}

func (l *changeLog) object(rv int) []byte {
	return fmt.Appendf(nil, `{"metadata":{"name":"x","resourceVersion":"%d"}}`, rv)
}

// objectFor is change rv as sink asked for it: JSON, or protobuf as
// kube-apiserver encodes a Secret.
func (l *changeLog) objectFor(sink Sink, rv int) []byte {
	if !sink.Protobuf() {
		return l.object(rv)
	}
	return protobufSecret(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x", ResourceVersion: strconv.Itoa(rv)}})
}

// write appends a change and sends it to every channel following.
func (l *changeLog) write() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last++
	for s := range l.subs {
		s.Send(watch.Modified, l.objectFor(s, l.last))
	}
}

// replica serves the log from first on: a resume from before it gets
// ERROR 410, as a hub whose change log begins later answers.
type replica struct {
	log   *changeLog
	first int
}

func (r *replica) Open(_ context.Context, sel *v1alpha1.GetOperation, sink Sink) (func(), *metav1.Status) {
	return func() {
		l := r.log
		l.mu.Lock()
		defer l.mu.Unlock()
		o := sel.Options
		if o.SendInitialEvents != nil && *o.SendInitialEvents {
			sink.Initial(watch.Added, l.objectFor(sink, l.last))
			sink.Initial(watch.Bookmark, fmt.Appendf(nil, `{"metadata":{"resourceVersion":"%d","annotations":{%q:"true"}}}`, l.last, metav1.InitialEventsAnnotationKey))
		} else {
			from, _ := strconv.Atoi(o.ResourceVersion)
			if from < r.first {
				sink.Close(&metav1.Status{Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: "too old"})
				return
			}
			for rv := from + 1; rv <= l.last; rv++ {
				sink.Send(watch.Modified, l.objectFor(sink, rv))
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

func startReplica(t *testing.T, r Handler) (*Server, *httptest.Server) {
	t.Helper()
	o := DefaultOptions()
	o.PingInterval = 100 * time.Millisecond
	srv := NewServer(r, o)
	hs := httptest.NewTLSServer(srv)
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		hs.Close()
	})
	return srv, hs
}

// TestSessionResumesOnAnotherReplica moves a session from replica a to b
// while changes are written, in each way a replica goes; the consumer must
// see every change once, in order, or an explicit 410 when b's log begins
// after the channel's resourceVersion. A channel that asked for protobuf
// objects resumes from the resourceVersion read in them, and still gets
// protobuf from b.
func TestSessionResumesOnAnotherReplica(t *testing.T) {
	for _, protobuf := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "protobuf"}[protobuf], func(t *testing.T) {
			testSessionResumesOnAnotherReplica(t, protobuf)
		})
	}
}

func testSessionResumesOnAnotherReplica(t *testing.T, protobuf bool) {
	var opts []WatchOption
	if protobuf {
		opts = append(opts, InProtobuf())
	}
	for _, tc := range []struct {
		name string
		// end ends replica a, whose address behind fwd is addr.
		end func(t *testing.T, srv *Server, fwd *forwarder.Forwarder, addr string)
		// bLate starts b's log after the channel's resourceVersion.
		bLate   bool
		want410 bool
	}{
		{name: "shutdown: ERROR 503 then close", end: func(t *testing.T, srv *Server, fwd *forwarder.Forwarder, addr string) {
			fwd.Remove(addr)
			if err := srv.Shutdown(context.Background()); err != nil {
				t.Fatal(err) // every connection answers its close frame here
			}
		}},
		{name: "killed: connection reset", end: func(_ *testing.T, _ *Server, fwd *forwarder.Forwarder, addr string) {
			fwd.Remove(addr)
			fwd.Cut(addr)
		}},
		{name: "vanished: silence until the idle timeout", end: func(_ *testing.T, _ *Server, fwd *forwarder.Forwarder, addr string) {
			fwd.Remove(addr)
			fwd.Blackhole(addr)
		}},
		{name: "b's log begins later: 410", bLate: true, want410: true, end: func(_ *testing.T, _ *Server, fwd *forwarder.Forwarder, addr string) {
			fwd.Remove(addr)
			fwd.Cut(addr)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &changeLog{subs: map[Sink]struct{}{}}
			a := &replica{log: log}
			b := &replica{log: log}
			srvA, hsA := startReplica(t, a)
			_, hsB := startReplica(t, b)
			addrA, addrB := hsA.Listener.Addr().String(), hsB.Listener.Addr().String()
			fwd, cfg := behindForwarder(t, hsA)
			var resumes []Resume
			var mu sync.Mutex
			s, err := NewSession(context.Background(), cfg, WithKeepalive(time.Second), WithResumeObserver(func(r Resume) {
				mu.Lock()
				resumes = append(resumes, r)
				mu.Unlock()
			}))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ch, err := s.Watch(context.Background(), sel("things"), opts...)
			if err != nil {
				t.Fatal(err)
			}
			ev := nextSession(t, ch)
			if ev.Type != watch.Added {
				t.Fatalf("first event %s, want the initial ADDED", ev.Type)
			}
			fwd.Add(addrB)
			for range 5 {
				log.write()
			}
			got := readRVsIn(t, ch, 5, protobuf)
			if tc.bLate {
				b.first = 6 // b's log begins after the channel's resourceVersion
			}
			tc.end(t, srvA, fwd, addrA)
			for range 5 {
				log.write()
			}
			if tc.want410 {
				ev := nextSession(t, ch)
				if ev.Type != watch.Error || ev.Status.Code != http.StatusGone {
					t.Fatalf("after the move, %s %+v; want ERROR 410", ev.Type, ev.Status)
				}
				if _, open := <-ch.Events; open {
					t.Fatal("Events open after the ERROR")
				}
			} else {
				got = append(got, readRVsIn(t, ch, 5, protobuf)...)
				for i, rv := range got {
					if rv != i+1 {
						t.Fatalf("resourceVersions %v: want 1..10, each once", got)
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(resumes) != 1 || resumes[0].Outcome != ResumeReopened || resumes[0].ResourceVersion != "5" {
				t.Errorf("resumes %+v, want one reopened from 5", resumes)
			}
		})
	}
}

// TestSessionShowsOnlyWhatWasAsked: the bookmarks and initial events a
// session adds for itself do not reach a consumer that did not ask for
// them.
func TestSessionShowsOnlyWhatWasAsked(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts metav1.ListOptions
		want []watch.EventType
	}{
		{"current state then changes", metav1.ListOptions{}, []watch.EventType{watch.Added, watch.Modified}},
		{"changes only", metav1.ListOptions{SendInitialEvents: ptr.To(false)}, []watch.EventType{watch.Modified}},
		{"initial events and their bookmark", metav1.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true},
			[]watch.EventType{watch.Added, watch.Bookmark, watch.Modified}},
		{"from a resourceVersion", metav1.ListOptions{ResourceVersion: "0"}, []watch.EventType{watch.Added, watch.Modified}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &changeLog{subs: map[Sink]struct{}{}}
			_, hs := startReplica(t, &replica{log: log})
			s, err := NewSession(context.Background(), restConfigFor(hs))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			op := sel("things")
			op.Options = tc.opts
			ch, err := s.Watch(context.Background(), op)
			if err != nil {
				t.Fatal(err)
			}
			// The open is answered before the replica registers the
			// channel: a write in between would not reach it.
			waitSubscribed(t, log)
			log.write()
			for i, want := range tc.want {
				if ev := nextSession(t, ch); ev.Type != want {
					t.Fatalf("event %d: %s, want %s (all: %v)", i, ev.Type, want, tc.want)
				}
			}
		})
	}
}

// behindForwarder puts a forwarder, a Service of one, in front of hs and
// returns it with a client configuration that reaches hs through it.
func behindForwarder(t *testing.T, hs *httptest.Server) (*forwarder.Forwarder, *rest.Config) {
	t.Helper()
	fwd, err := forwarder.Start(hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fwd.Close() })
	cfg := restConfigFor(hs)
	cfg.Host = "https://" + fwd.Addr()
	return fwd, cfg
}

func waitSubscribed(t *testing.T, l *changeLog) {
	t.Helper()
	waitFollowed(t, &l.mu, func() int { return len(l.subs) })
}

// waitFollowed waits until subscribers, read under mu, says a channel
// follows a fake replica's log.
func waitFollowed(t *testing.T, mu *sync.Mutex, subscribers func() int) {
	t.Helper()
	for range 500 {
		mu.Lock()
		n := subscribers()
		mu.Unlock()
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the channel never followed the log")
}

func nextSession(t *testing.T, ch *SessionChannel) Event {
	t.Helper()
	select {
	case ev, ok := <-ch.Events:
		if !ok {
			t.Fatal("Events closed")
		}
		return ev
	case <-time.After(20 * time.Second):
		t.Fatal("no event within 20 s")
	}
	return Event{}
}

// readRVs reads n events and returns their resourceVersions.
func readRVs(t *testing.T, ch *SessionChannel, n int) []int {
	t.Helper()
	return readRVsIn(t, ch, n, false)
}

// readRVsIn is readRVs of events whose objects must be protobuf, or JSON.
func readRVsIn(t *testing.T, ch *SessionChannel, n int, protobuf bool) []int {
	t.Helper()
	var out []int
	for range n {
		ev := nextSession(t, ch)
		if ev.Type == watch.Error {
			t.Fatalf("ERROR %d %s", ev.Status.Code, ev.Status.Message)
		}
		if (ev.Protobuf != nil) != protobuf || (ev.Object != nil) == protobuf {
			t.Fatalf("event with %d bytes of protobuf and %d of JSON; want protobuf %v", len(ev.Protobuf), len(ev.Object), protobuf)
		}
		var rv int
		if protobuf {
			rv, _ = strconv.Atoi(decodeProtobufSecret(t, ev.Protobuf).ResourceVersion)
		} else {
			var m meta
			if err := json.Unmarshal(ev.Object, &m); err != nil {
				t.Fatal(err)
			}
			rv, _ = strconv.Atoi(m.Metadata.ResourceVersion)
		}
		out = append(out, rv)
	}
	return out
}

// TestSessionGivesUpAChannelPastTheResumeTimeout: with no replica to go
// to, a channel's events end without an ERROR once the resume timeout has
// passed, so that its consumer can resume elsewhere; the session itself
// keeps dialing, and says when it is connected again.
func TestSessionGivesUpAChannelPastTheResumeTimeout(t *testing.T) {
	log := &changeLog{subs: map[Sink]struct{}{}}
	_, hsA := startReplica(t, &replica{log: log})
	_, hsB := startReplica(t, &replica{log: log})
	addrA, addrB := hsA.Listener.Addr().String(), hsB.Listener.Addr().String()
	fwd, cfg := behindForwarder(t, hsA)
	var mu sync.Mutex
	var resumes []string
	connected := make(chan bool, 8)
	s, err := NewSession(context.Background(), cfg,
		WithResumeTimeout(300*time.Millisecond),
		WithConnectionObserver(func(up bool) { connected <- up }),
		WithResumeObserver(func(r Resume) {
			mu.Lock()
			resumes = append(resumes, r.Outcome)
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if up := <-connected; !up {
		t.Fatal("first connection observed as down")
	}
	ch, err := s.Watch(context.Background(), sel("things"))
	if err != nil {
		t.Fatal(err)
	}
	if ev := nextSession(t, ch); ev.Type != watch.Added {
		t.Fatalf("first event %s, want the initial ADDED", ev.Type)
	}

	fwd.Remove(addrA)
	fwd.Cut(addrA)
	if up := <-connected; up {
		t.Fatal("the cut was observed as a connection up")
	}
	select {
	case ev, open := <-ch.Events:
		if open {
			t.Fatalf("got %s %+v; want the events to end without one", ev.Type, ev.Status)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the channel was not given up")
	}
	mu.Lock()
	if len(resumes) != 1 || resumes[0] != ResumeTimedOut {
		t.Errorf("resumes %v, want one %s", resumes, ResumeTimedOut)
	}
	mu.Unlock()

	fwd.Add(addrB)
	select {
	case up := <-connected:
		if !up {
			t.Fatal("observed down twice in a row")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the session did not connect to b")
	}
	again, err := s.Watch(context.Background(), sel("things"))
	if err != nil {
		t.Fatalf("a new channel after the reconnect: %v", err)
	}
	if ev := nextSession(t, again); ev.Type != watch.Added {
		t.Fatalf("first event on b %s, want the initial ADDED", ev.Type)
	}
}
