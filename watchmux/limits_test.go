package watchmux

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestChannelLimitHoldsUnderABurst: with some channels open, a burst of
// watch requests whose opens all wait (as on a SubjectAccessReview), more
// than the channels left but within the pending limit, opens exactly up to
// MaxChannels; the rest are refused 429 at once. Issue 14 saw 4,128
// channels on a connection limited to 4,096 this way: the limit was
// counted against open channels, not against those being opened.
func TestChannelLimitHoldsUnderABurst(t *testing.T) {
	const maxChannels, before, burst = 8, 4, 16
	o := DefaultOptions()
	o.MaxChannels, o.MaxPending = maxChannels, burst
	_, hs, h := startServer(t, o)
	c := dial(t, hs)
	ctx := context.Background()
	for range before {
		if _, err := c.Watch(ctx, sel("count-0")); err != nil {
			t.Fatal(err)
		}
	}

	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		opened           []*Channel
		refused, failing int
	)
	for range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch, err := c.Watch(ctx, sel("slow"))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				opened = append(opened, ch)
			case apierrors.IsTooManyRequests(err):
				refused++
			default:
				failing++
				t.Errorf("burst open: %v", err)
			}
		}()
	}
	// Every request of the burst has been either refused or handed to the
	// handler before any open completes.
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return int(h.entered.Load())+refused+failing >= burst, nil
	}); err != nil {
		t.Fatalf("burst not decided: %d entered the handler, %d refused", h.entered.Load(), refused)
	}
	close(h.release)
	wg.Wait()
	if got := before + len(opened); got != maxChannels {
		t.Errorf("%d channels open after a burst of %d on %d open, want exactly the limit %d (%d refused)", got, burst, before, maxChannels, refused)
	}
	if refused != burst-(maxChannels-before) {
		t.Errorf("%d of the burst refused with 429, want %d", refused, burst-(maxChannels-before))
	}

	// At the limit, one more is refused; closing one frees its slot, and a
	// refused open gives back the slot it held while being decided.
	if _, err := c.Watch(ctx, sel("count-0")); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("open at the limit: %v, want 429", err)
	}
	if len(opened) == 0 {
		t.Fatal("nothing of the burst opened")
	}
	if err := c.CloseWatch(ctx, opened[0]); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := c.Watch(ctx, sel("refuse")); !apierrors.IsForbidden(err) {
			t.Fatalf("refused open %d: %v, want 403", i, err)
		}
	}
	if _, err := c.Watch(ctx, sel("count-0")); err != nil {
		t.Fatalf("open after closing one at the limit: %v", err)
	}
	var status apierrors.APIStatus
	if _, err := c.Watch(ctx, sel("count-0")); !errors.As(err, &status) || status.Status().Code != http.StatusTooManyRequests {
		t.Fatalf("open past the limit again: %v, want 429", err)
	}
}

// TestClientWaitsRatherThanBeRefused: a burst of opens larger than the
// server's pending bound, all held by a slow authorization, is refused in
// part when the client sends it all at once, and opened in full when the
// client keeps to the bound (WithMaxOpening). Behind the node endpoint a
// kubelet starting a pod with a hundred objects sent such a burst, and
// each refused open went to kube-apiserver instead of the hub.
func TestClientWaitsRatherThanBeRefused(t *testing.T) {
	const maxPending, burst = 4, 20
	for _, tc := range []struct {
		name       string
		maxOpening int
		refused    int
	}{
		{"all at once", 0, burst - maxPending},
		{"within the bound", maxPending, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			o.MaxPending = maxPending
			_, hs, h := startServer(t, o)
			c, err := Dial(context.Background(), restConfigFor(hs), WithMaxOpening(tc.maxOpening))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			var (
				wg              sync.WaitGroup
				mu              sync.Mutex
				opened, refused int
			)
			for range burst {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := c.Watch(context.Background(), sel("slow"))
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						opened++
					case apierrors.IsTooManyRequests(err):
						refused++
					default:
						t.Errorf("open: %v", err)
					}
				}()
			}
			// The server holds maxPending opens; the client sends no
			// more (or the server refuses the rest) until they finish.
			if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				mu.Lock()
				defer mu.Unlock()
				return int(h.entered.Load()) == maxPending && refused == tc.refused, nil
			}); err != nil {
				t.Fatalf("%d opens entered the handler and %d were refused, want %d and %d", h.entered.Load(), refused, maxPending, tc.refused)
			}
			close(h.release)
			wg.Wait()
			if opened != burst-tc.refused || refused != tc.refused {
				t.Errorf("%d opened, %d refused, want %d and %d", opened, refused, burst-tc.refused, tc.refused)
			}
		})
	}
}
