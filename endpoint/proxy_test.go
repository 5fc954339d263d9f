package endpoint

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// TestWatchOnItsWayWhenTheHubReturnsIsReturnedToo: a kubelet watch
// proxied while the hub was down, whose answer from kube-apiserver comes
// only after the hub is back (and after returnToHub swept the watches it
// knew), still ends, so that the kubelet watches again through the hub
// rather than on kube-apiserver until the watch's timeout.
func TestWatchOnItsWayWhenTheHubReturnsIsReturnedToo(t *testing.T) {
	arrived, answer := make(chan struct{}), make(chan struct{})
	apiserver := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-answer
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // a watch: events until the client goes
	}))
	defer apiserver.Close()
	up, err := newUpstream(&rest.Config{Host: apiserver.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, kubelet)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/ns/secrets?watch=true", nil)
	ctx, cancel := context.WithCancel(req.Context())
	defer func() { cancel(); <-done }() // a watch still proxied must not outlive the test
	go func() {
		defer close(done)
		up.serve(rec, req.WithContext(ctx), "secrets", "watch", true, clientKey{}, nil)
	}()
	<-arrived
	up.returnToHub() // the hub is back while kube-apiserver has not answered yet
	close(answer)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Error("the watch that was on its way when the hub came back is still proxied to kube-apiserver")
	}
	cancel()
	<-done
	if rec.Code != http.StatusOK {
		t.Errorf("status %d, want 200: the watch ends as kube-apiserver ends one at its timeout", rec.Code)
	}
	if b, _ := io.ReadAll(rec.Body); len(b) != 0 {
		t.Errorf("body %q, want none", b)
	}
}

// TestWatchProxiedWhileTheHubIsUpStays: a watch proxied while the hub was
// up (the hub refused it, or it is not one the hub serves) is not ended by
// the hub's being up: only its coming back ends watches.
func TestWatchProxiedWhileTheHubIsUpStays(t *testing.T) {
	apiserver := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer apiserver.Close()
	up, err := newUpstream(&rest.Config{Host: apiserver.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, kubelet)
	if err != nil {
		t.Fatal(err)
	}
	up.returnToHub() // the hub came up before the watch was sent
	req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/ns/secrets?watch=true", nil)
	ctx, cancel := contextWithTimeout(req, 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	up.serve(httptest.NewRecorder(), req.WithContext(ctx), "secrets", "watch", true, clientKey{}, nil)
	if ctx.Err() == nil {
		t.Fatalf("the watch ended after %v while the client still held it", time.Since(start))
	}
}

func contextWithTimeout(req *http.Request, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(req.Context(), d)
}
