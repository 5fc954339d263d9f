package watchmux

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// initialSel is sel opened with sendInitialEvents, as a streaming list
// (client-go's WatchList) or a Session opens its channels.
func initialSel(resource string) v1alpha1.GetOperation {
	s := sel(resource)
	s.Options.SendInitialEvents = ptr.To(true)
	return s
}

// readInitial reads a channel of initial-N-L: its N initial events in
// order, then its bookmark, then live events until upTo of them, an
// ERROR or the channel's end, and returns how many live events it read
// and the ERROR, if any.
func readInitial(t *testing.T, ch *Channel, n, upTo int) (int, *Event) {
	t.Helper()
	for i := range n {
		ev, ok := next(t, ch)
		if !ok || ev.Type != watch.Added || string(ev.Object) != fmt.Sprintf(`{"n":%d}`, i) {
			t.Fatalf("initial event %d: %v %s (open %v)", i, ev.Type, ev.Object, ok)
		}
	}
	if ev, ok := next(t, ch); !ok || ev.Type != watch.Bookmark {
		t.Fatalf("after the initial events: %v %s (open %v), want the bookmark", ev.Type, ev.Object, ok)
	}
	for live := 0; ; live++ {
		if live == upTo {
			return live, nil
		}
		ev, ok := next(t, ch)
		if !ok {
			return live, nil
		}
		if ev.Type == watch.Error {
			return live, &ev
		}
		if string(ev.Object) != fmt.Sprintf(`{"live":%d}`, live) {
			t.Fatalf("live event %d: %v %s", live, ev.Type, ev.Object)
		}
	}
}

// TestClientHoldsAWholeInitialState: a channel opened with initial
// events gets an initial state many times ClientEventBuffer whole and in
// order, though its consumer reads nothing until all of it has come (as
// the endpoint's pump is still starting when the hub has sent hundreds),
// and the changes that follow it while the consumer reads it.
func TestClientHoldsAWholeInitialState(t *testing.T) {
	_, hs, _ := startServer(t, DefaultOptions())
	c := dial(t, hs)
	const initial, live = 20 * ClientEventBuffer, ClientEventBuffer - 1
	ch, err := c.Watch(context.Background(), initialSel(fmt.Sprintf("initial-%d-%d", initial, live)))
	if err != nil {
		t.Fatal(err)
	}
	// Let everything arrive before reading any.
	time.Sleep(time.Second)
	got, end := readInitial(t, ch, initial, live)
	if end != nil || got != live {
		t.Fatalf("after the initial state: %d live events, then %+v; want %d and the channel open", got, end, live)
	}
}

// TestClientBoundsWhatFollowsAnInitialState: after its initial state, a
// channel whose consumer reads nothing ends with ERROR 410 once
// ClientEventBuffer changes wait, as a channel without one does
// (TestClientClosesAChannelItsConsumerDoesNotRead).
func TestClientBoundsWhatFollowsAnInitialState(t *testing.T) {
	_, hs, _ := startServer(t, DefaultOptions())
	c := dial(t, hs)
	const initial = 4 * ClientEventBuffer
	ch, err := c.Watch(context.Background(), initialSel(fmt.Sprintf("initial-%d-1000", initial)))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	got, end := readInitial(t, ch, initial, 1000)
	if end == nil || end.Status.Code != http.StatusGone || got != ClientEventBuffer {
		t.Fatalf("after the initial state: %d live events, then %+v; want %d and ERROR 410", got, end, ClientEventBuffer)
	}
	if _, ok := next(t, ch); ok {
		t.Fatal("an event after the ERROR")
	}
}

// TestAHeldChannelsEventsAllComeWhenItsConnectionEnds: the server ends
// every channel with an ERROR and closes the connection at once (the hub
// bookmarking its views and sending 503 as it shuts down, or its 401 at a
// refused credential), while the consumer of a channel still holds a
// large initial state unread. Everything the connection brought still
// comes, in order, and the ERROR last: dropped, the bookmark before the
// ERROR (a shutting-down replica's last resume point) would move the
// consumer's resume point back, and a view resumed from there on a
// replica started since is sent afresh (TestFailoverLosesNothing, rolling
// through node endpoints, lost the versions in between).
func TestAHeldChannelsEventsAllComeWhenItsConnectionEnds(t *testing.T) {
	for range 20 { // the forwarder races the connection's end
		h := &testHandler{release: make(chan struct{})}
		srv := NewServer(h, DefaultOptions())
		end := make(chan *metav1.Status, 1)
		hs := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			srv.ServeDetached(context.Background(), w, r, end, func() {})
		}))
		c, err := Dial(context.Background(), restConfigFor(hs))
		if err != nil {
			t.Fatal(err)
		}
		ch, err := c.Watch(context.Background(), initialSel(fmt.Sprintf("initial-%d-0", 4*ClientEventBuffer)))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the initial state held, unread
		end <- &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnauthorized, Reason: metav1.StatusReasonUnauthorized, Message: "Unauthorized"}
		<-c.Done()
		if _, end := readInitial(t, ch, 4*ClientEventBuffer, -1); end == nil || end.Status == nil || end.Status.Code != http.StatusUnauthorized {
			t.Fatalf("after the initial state: %+v, want the server's ERROR 401", end)
		}
		if ev, ok := next(t, ch); ok {
			t.Fatalf("after the ERROR: %v %s", ev.Type, ev.Object)
		}
		close(h.release)
		_ = srv.Shutdown(context.Background())
		hs.Close()
	}
}
