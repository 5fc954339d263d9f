package cache

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// TestAnOutageLastsFromTheFirstFailureToTheNextSuccess drives a store's
// ListerWatcher through what a kube-apiserver restart looks like to a
// reflector (the logic only; TestCacheCatchesUpSoonAfterKubeAPIServerRestart
// in hub does it to a real kube-apiserver): refused watches,
// a watch accepted then ended with 410 Expired, a list that succeeds.
func TestAnOutageLastsFromTheFirstFailureToTheNextSuccess(t *testing.T) {
	s := newStore(served[1], 16)
	var listErr, watchErr error
	fw := watch.NewFake()
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) { return nil, listErr },
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			if watchErr != nil {
				return nil, watchErr
			}
			return fw, nil
		},
	}
	o := newObservedListWatch(lw, s)
	ctx := context.Background()
	outage := func() Freshness { return s.Freshness(time.Now()) }

	if _, err := o.ListWithContext(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if f := outage(); f.Outage != 0 || f.LastError != "" {
		t.Fatalf("after a list: %+v, want no outage", f)
	}

	watchErr = errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	_, _ = o.WatchWithContext(ctx, metav1.ListOptions{})
	time.Sleep(10 * time.Millisecond)
	_, _ = o.WatchWithContext(ctx, metav1.ListOptions{})
	first := outage()
	if first.Outage < 10*time.Millisecond || first.LastError != watchErr.Error() {
		t.Fatalf("after two refused watches 10 ms apart: %+v, want an outage of 10 ms or more naming the error", first)
	}

	// Accepted, then 410 in the stream: the outage ends at the accept and
	// starts again at the 410.
	watchErr = nil
	w, err := o.WatchWithContext(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if f := outage(); f.Outage != 0 {
		t.Fatalf("after an accepted watch: %+v, want no outage", f)
	}
	gone := apierrors.NewResourceExpired("too old resource version: 1 (5)")
	go fw.Error(&gone.ErrStatus)
	if e := <-w.ResultChan(); e.Type != watch.Error {
		t.Fatalf("got %s, want the ERROR passed through", e.Type)
	}
	if f := outage(); f.LastError == "" {
		t.Fatalf("after ERROR 410 in the stream: %+v, want an outage", f)
	}
	w.Stop()

	listErr = apierrors.NewTooManyRequests("storage is (re)initializing", 1)
	_, _ = o.ListWithContext(ctx, metav1.ListOptions{})
	if f := outage(); f.LastError != listErr.Error() {
		t.Fatalf("after a throttled list: %+v", f)
	}
	listErr = nil
	_, _ = o.ListWithContext(ctx, metav1.ListOptions{})
	if f := outage(); f.Outage != 0 || f.LastError != "" {
		t.Fatalf("after a list that succeeded: %+v, want no outage", f)
	}
	// A failure while the cache stops is no outage.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	listErr = context.Canceled
	_, _ = o.ListWithContext(cancelled, metav1.ListOptions{})
	if f := outage(); f.Outage != 0 {
		t.Fatalf("after a list cut by the cache stopping: %+v, want no outage", f)
	}
}

func TestFailuresAreSortedByReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{apierrors.NewResourceExpired("too old resource version"), "expired"},
		{apierrors.NewGone("gone"), "expired"},
		{apierrors.NewTooManyRequests("storage is (re)initializing", 1), "throttled"},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, "unreachable"},
		{apierrors.NewForbidden(served[1].gvr.GroupResource(), "", errors.New("no RBAC")), "error"},
	} {
		if got := failureReason(tc.err); got != tc.want {
			t.Errorf("failureReason(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

// TestTheWrapperKeepsTheReflectorsChoiceOfStreamingLists: a reflector
// uses streaming lists (watch-list) unless its ListerWatcher says its
// client cannot; wrapping must not change the answer either way.
func TestTheWrapperKeepsTheReflectorsChoiceOfStreamingLists(t *testing.T) {
	s := newStore(served[1], 16)
	lw := &toolscache.ListWatch{}
	for _, tc := range []struct {
		name   string
		client any
	}{
		{"fake clientset (cannot)", fake.NewClientset()},
		{"a client that says nothing (can)", struct{}{}},
	} {
		inner := toolscache.ToListWatcherWithWatchListSemantics(lw, tc.client)
		want := watchlist.DoesClientNotSupportWatchListSemantics(inner)
		if got := watchlist.DoesClientNotSupportWatchListSemantics(newObservedListWatch(inner, s)); got != want {
			t.Errorf("%s: wrapped says unsupported=%v, unwrapped %v", tc.name, got, want)
		}
	}
}
