package watchmux

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// TestSessionEndsWhenItsCredentialIsRefused: the server ends every
// channel with ERROR 401 and closes the connection (close code 1008), as
// the hub does when a connection's credential no longer authenticates,
// and then refuses every upgrade with 401. A session with
// WithEndOnUnauthorized delivers the 401, tells its caller once and
// dials no more; one without keeps dialing.
func TestSessionEndsWhenItsCredentialIsRefused(t *testing.T) {
	for _, endOnUnauthorized := range []bool{true, false} {
		t.Run(map[bool]string{true: "ends", false: "keeps dialing"}[endOnUnauthorized], func(t *testing.T) {
			log := &changeLog{subs: map[Sink]struct{}{}}
			o := DefaultOptions()
			o.PingInterval = 100 * time.Millisecond
			srv := NewServer(&replica{log: log}, o)
			end := make(chan *metav1.Status, 1)
			var upgrades, refusedUpgrades atomic.Int32
			var revoked atomic.Bool
			hs := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if revoked.Load() {
					refusedUpgrades.Add(1)
					st := apierrors.NewUnauthorized("Unauthorized").ErrStatus
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusUnauthorized)
					_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"` + st.Message + `","reason":"Unauthorized","code":401}`))
					return
				}
				upgrades.Add(1)
				srv.ServeDetached(context.Background(), w, r, end, func() {})
			}))
			t.Cleanup(func() {
				_ = srv.Shutdown(context.Background())
				hs.Close()
			})
			cfg := &rest.Config{Host: hs.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
			refused := make(chan error, 2)
			var opts []SessionOption
			if endOnUnauthorized {
				opts = append(opts, WithEndOnUnauthorized(func(err error) { refused <- err }))
			}
			s, err := NewSession(context.Background(), cfg, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ch, err := s.Watch(context.Background(), sel("things"))
			if err != nil {
				t.Fatal(err)
			}
			if ev := nextSession(t, ch); ev.Type != watch.Added {
				t.Fatalf("first event %s, want the initial ADDED", ev.Type)
			}

			revoked.Store(true)
			st := apierrors.NewUnauthorized("Unauthorized").ErrStatus
			end <- &st
			for ev := range ch.Events {
				if ev.Type == watch.Error {
					if ev.Status == nil || ev.Status.Code != http.StatusUnauthorized {
						t.Fatalf("the channel ended with %+v, want 401", ev.Status)
					}
					break
				}
			}
			if !endOnUnauthorized {
				for refusedUpgrades.Load() < 3 {
					time.Sleep(10 * time.Millisecond)
				}
				return
			}
			select {
			case err := <-refused:
				t.Logf("refused: %v", err)
			case <-time.After(20 * time.Second):
				t.Fatal("the session did not say its credential was refused")
			}
			if s.Connected() {
				t.Error("the session is connected after its credential was refused")
			}
			if _, err := s.Watch(context.Background(), sel("things")); err == nil {
				t.Error("a new channel on the ended session was opened")
			}
			if got := refusedUpgrades.Load(); got != 0 {
				t.Errorf("the session dialed %d times after the server closed it for its credential", got)
			}
			if len(refused) != 0 {
				t.Error("told more than once")
			}
		})
	}
}
