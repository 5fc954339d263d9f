package cache

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// ReflectorBackoff is how long a type's reflector waits between failed
// lists and watches, and before it relists after its watch expired: 0.5 s
// doubling to 2 s, each wait stretched by up to half again at random
// (jitter), so [2, 3) s once capped.
//
// client-go's default (0.8 s doubling to 30 s, jitter 1.0, so up to 60 s,
// reset only two minutes after the previous reset) suits one of 5,000
// kubelets backing off from a struggling kube-apiserver. Behind nodeproxy
// one reflector per type holds every node's data, and a wait is paid by
// all of them: a watch that comes back to a restarted kube-apiserver is
// told its resourceVersion is too old, and the relist then waits one more
// step of a backoff the outage had already grown.
// A restart costs at most two waits (the retry pending when kube-apiserver
// comes back, then the relist after the expired watch), so the cap bounds
// the catch-up at about 6 s. The update-to-node times with either backoff
// are in docs/operations.md, "Freshness", with the benchmark that measures
// them.
//
// What the lower cap costs kube-apiserver: nine reflectors per replica
// retrying at most every 2 s, about 5 requests a second from each hub
// replica during an outage, each refused cheaply (connection refused, 429
// from API Priority and Fairness, or a relist served from kube-apiserver's
// watch cache at the last resourceVersion); the kubelets behind nodeproxy
// no longer send their own.
func ReflectorBackoff() wait.Backoff {
	return wait.Backoff{
		Duration: 500 * time.Millisecond,
		Factor:   2,
		Jitter:   0.5,
		// Steps only has to outlast the doubling: the cap ends it.
		Steps: 4,
		Cap:   2 * time.Second,
	}
}

// Freshness is how current one store is.
type Freshness struct {
	Resource string
	// SinceHeard is the time since kube-apiserver last told the store
	// anything: an event, a bookmark or a list. A healthy watch hears at
	// least a bookmark about every minute, so this grows on a quiet type
	// and is no failure by itself.
	SinceHeard time.Duration
	// Heard is false until the store has heard anything.
	Heard bool
	// Outage is how long the type's lists and watches have been failing
	// with no success since; 0 while they succeed.
	Outage time.Duration
	// LastError is the latest failure of the outage, "" when there is
	// none. It names kube-apiserver's answer (connection refused, 410
	// Expired, 429, forbidden), never object data.
	LastError string
}

// freshness is what one store knows of how current it is. Written by the
// store's reflector (its writes, lists and watches), read by /readyz and
// /metrics, without locks.
type freshness struct {
	// heard is when kube-apiserver last told the store anything (unix
	// nanoseconds; 0 never).
	heard atomic.Int64
	// failingSince is when the current run of failed lists and watches
	// began (unix nanoseconds; 0 while they succeed).
	failingSince atomic.Int64
	lastError    atomic.Pointer[string]
}

func (f *freshness) heardAt(t time.Time) { f.heard.Store(t.UnixNano()) }

// succeeded ends an outage: a list answered, or a watch was opened.
func (f *freshness) succeeded() {
	if f.failingSince.Load() != 0 {
		f.failingSince.Store(0)
		f.lastError.Store(nil)
	}
}

// failed starts an outage unless one is under way.
func (f *freshness) failed(err error, now time.Time) {
	msg := err.Error()
	f.lastError.Store(&msg)
	f.failingSince.CompareAndSwap(0, now.UnixNano())
}

func (f *freshness) at(resource string, now time.Time) Freshness {
	out := Freshness{Resource: resource}
	if h := f.heard.Load(); h != 0 {
		out.Heard, out.SinceHeard = true, now.Sub(time.Unix(0, h))
	}
	if since := f.failingSince.Load(); since != 0 {
		out.Outage = max(now.Sub(time.Unix(0, since)), 0)
		if msg := f.lastError.Load(); msg != nil {
			out.LastError = *msg
		}
	}
	return out
}

// observedListWatch is a type's ListerWatcher that tells the store's
// freshness (and the failure metric) how each list and watch went. The
// reflector's own error handler cannot: it never hears the watch retries
// it backs off from (connection refused, 429), which is all it sees while
// kube-apiserver is down.
type observedListWatch struct {
	inner    toolscache.ListerWatcherWithContext
	client   any // what decides whether watch-list (streaming lists) may be used
	fresh    *freshness
	failures failureMetrics
}

func newObservedListWatch(lw toolscache.ListerWatcher, s *Store) *observedListWatch {
	return &observedListWatch{
		inner:    toolscache.ToListerWatcherWithContext(lw),
		client:   lw,
		fresh:    &s.fresh,
		failures: newFailureMetrics(s.Resource.Resource),
	}
}

func (o *observedListWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return o.ListWithContext(context.Background(), opts)
}

func (o *observedListWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return o.WatchWithContext(context.Background(), opts)
}

func (o *observedListWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	list, err := o.inner.ListWithContext(ctx, opts)
	o.record(ctx, requestList, err)
	return list, err
}

func (o *observedListWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	request := requestWatch
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		request = requestList // a streaming list (watch-list)
	}
	w, err := o.inner.WatchWithContext(ctx, opts)
	o.record(ctx, request, err)
	if err != nil {
		return w, err
	}
	// A watch kube-apiserver accepted can still end at once with an ERROR
	// event: 410 Expired for a resourceVersion older than a restarted
	// kube-apiserver's watch cache, the usual first answer after a
	// restart.
	ow := &observedWatch{inner: w, result: make(chan watch.Event), stop: make(chan struct{})}
	go ow.run(func(e watch.Event) { o.record(ctx, request, apierrors.FromObject(e.Object)) })
	return ow, nil
}

// observedWatch passes a watch's events on, showing its ERROR events to
// onError first. Unlike watch.Filter, its goroutine ends when the
// consumer stops the watch, even with an event it could not hand over.
type observedWatch struct {
	inner    watch.Interface
	result   chan watch.Event
	stop     chan struct{}
	stopOnce sync.Once
}

func (w *observedWatch) ResultChan() <-chan watch.Event { return w.result }

func (w *observedWatch) Stop() {
	w.stopOnce.Do(func() {
		close(w.stop)
		w.inner.Stop()
	})
}

func (w *observedWatch) run(onError func(watch.Event)) {
	defer close(w.result)
	for e := range w.inner.ResultChan() {
		if e.Type == watch.Error {
			onError(e)
		}
		select {
		case w.result <- e:
		case <-w.stop:
			return
		}
	}
}

// IsWatchListSemanticsUnSupported keeps the reflector's choice of
// streaming lists what it would be without this wrapper.
func (o *observedListWatch) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(o.client)
}

func (o *observedListWatch) record(ctx context.Context, request string, err error) {
	if err == nil {
		o.fresh.succeeded()
		return
	}
	if ctx.Err() != nil {
		return // the cache is stopping
	}
	o.fresh.failed(err, time.Now())
	o.failures.inc(request, failureReason(err))
}

const (
	requestList  = "list"
	requestWatch = "watch"
)

// failureReason sorts a failed list or watch for the failure metric.
func failureReason(err error) string {
	switch {
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		return "expired"
	case apierrors.IsTooManyRequests(err):
		return "throttled"
	case utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err):
		return "unreachable"
	default:
		return "error"
	}
}
