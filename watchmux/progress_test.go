package watchmux

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// progressToken is the token of a bookmark answering a progress request;
// "" for any other event.
func progressToken(t *testing.T, ev Event) string {
	t.Helper()
	if ev.Type != watch.Bookmark {
		return ""
	}
	var m meta
	if err := json.Unmarshal(ev.Object, &m); err != nil {
		t.Fatal(err)
	}
	return m.Metadata.Annotations[v1alpha1.NodeViewProgressAnnotation]
}

// TestProgressRequests: a channel whose stream takes progress requests
// gets each, after its response, and goes on; other channels, unknown
// channels and bad tokens are refused, and leave the channel alone.
func TestProgressRequests(t *testing.T) {
	_, hs, _ := startServer(t, DefaultOptions())
	c := dial(t, hs)
	ctx := context.Background()
	ch, err := c.Watch(ctx, sel("progress"))
	if err != nil {
		t.Fatal(err)
	}
	if ev, _ := next(t, ch); ev.Type != watch.Bookmark || progressToken(t, ev) != "" {
		t.Fatalf("first event %s %s, want the initial state's bookmark", ev.Type, ev.Object)
	}
	for _, token := range []string{"t1", "t2"} {
		if err := c.RequestProgress(ctx, ch.ID, token); err != nil {
			t.Fatal(err)
		}
		if ev, ok := next(t, ch); !ok || progressToken(t, ev) != token {
			t.Fatalf("after the request for %s: %s %s (open %v)", token, ev.Type, ev.Object, ok)
		}
	}

	plain, err := c.Watch(ctx, sel("count-0"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		channel int64
		token   string
		code    int32
		message string
	}{
		{"a channel that does not take them", plain.ID, "t", http.StatusBadRequest, "does not take progress requests"},
		{"a channel not open", 12345, "t", http.StatusNotFound, "not open on this connection"},
		{"a token too long", ch.ID, strings.Repeat("t", v1alpha1.MaxProgressTokenLength+1), http.StatusBadRequest, "must be 1 to 64"},
		{"no token", ch.ID, "", http.StatusBadRequest, "must be 1 to 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.RequestProgress(ctx, tc.channel, tc.token)
			var status *apierrors.StatusError
			if !errors.As(err, &status) || status.ErrStatus.Code != tc.code || !strings.Contains(status.ErrStatus.Message, tc.message) {
				t.Fatalf("got %v, want %d naming %q", err, tc.code, tc.message)
			}
		})
	}
	// Both channels are still open: a refused request closes nothing.
	if err := c.RequestProgress(ctx, ch.ID, "t3"); err != nil {
		t.Fatal(err)
	}
	if ev, ok := next(t, ch); !ok || progressToken(t, ev) != "t3" {
		t.Fatalf("after the refusals: %s %s (open %v)", ev.Type, ev.Object, ok)
	}
	if err := c.CloseWatch(ctx, plain); err != nil {
		t.Fatalf("the refused channel: %v", err)
	}
}

// TestSessionChannelRequestsProgress: a session's channel sends the
// request on its connection, and the answer comes as a bookmark, batched
// or not (a consumer that did not ask for bookmarks still gets the one
// it asked for); without a connection, ErrNotConnected at once.
func TestSessionChannelRequestsProgress(t *testing.T) {
	_, hs, _ := startServer(t, DefaultOptions())
	fwd, cfg := behindForwarder(t, hs)
	ctx := context.Background()
	s, err := NewSession(ctx, cfg, WithKeepalive(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	batched, err := s.WatchBatches(ctx, sel("progress"))
	if err != nil {
		t.Fatal(err)
	}
	if ev := nextSession(t, batched); progressToken(t, ev) != "" {
		t.Fatalf("first event %s %s, want the initial state's bookmark", ev.Type, ev.Object)
	}
	plain, err := s.Watch(ctx, sel("progress"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []*SessionChannel{batched, plain} {
		if err := ch.RequestProgress(ctx, "t1"); err != nil {
			t.Fatal(err)
		}
		if ev := nextSession(t, ch); progressToken(t, ev) != "t1" {
			t.Fatalf("after the request: %s %s", ev.Type, ev.Object)
		}
	}

	// The hub goes, and no other answers: the channel is between
	// connections until the session dials one.
	fwd.Remove(hs.Listener.Addr().String())
	fwd.Cut(hs.Listener.Addr().String())
	deadline := time.Now().Add(10 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		err := batched.RequestProgress(rctx, "t2")
		cancel()
		if errors.Is(err, ErrNotConnected) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with the hub gone, the request got %v, want ErrNotConnected", err)
		}
		time.Sleep(20 * time.Millisecond) // the reader has not seen the cut yet
	}
}
