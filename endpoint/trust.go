package endpoint

import (
	"context"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// trust is what the follower knows of the copy beyond the hub's view:
// the newest version the node has seen served, when kube-apiserver last
// answered the kubelet's watches of the view, and whether the copy may
// vouch for what it holds.
//
// A copy vouches for what it holds when it took in everything the node
// was served of its view: the view's batches, and what observe.go
// observed. When something was served that it could not take in, it is
// distrusted: offline it serves nothing (the kubelet's reads fail as
// they would without the endpoint), since it might serve the past. It
// is trusted again once the hub has brought it to a position taken after
// that moment: a channel of the view opened since, or a progress request
// answered since.
type trust struct {
	newest atomic.Uint64 // the newest resourceVersion the node was served
	// heardAt is when kube-apiserver last told the kubelet anything of
	// the view (a watch event or bookmark, an answer), in Unix
	// nanoseconds on the monotonic clock's base (mono): the copy is as
	// current as that, offline.
	heardAt atomic.Int64
	// distrustedAt is when the copy last could not take in what was
	// served (mono nanoseconds, 0: never since it was last trusted).
	distrustedAt atomic.Int64
}

// base is the origin of mono: durations since it are monotonic.
var base = time.Now()

func mono() int64 { return int64(time.Since(base)) }

// seen notes that the node was served version rv.
func (f *viewFollower) seen(rv uint64) {
	for {
		old := f.trust.newest.Load()
		if rv <= old || f.trust.newest.CompareAndSwap(old, rv) {
			break
		}
	}
	f.heard()
}

// newestSeen is the newest version the node was served, or the copy's
// newest position, whichever is later.
func (f *viewFollower) newestSeen() uint64 {
	n := f.trust.newest.Load()
	for i := range v1alpha1.NodeViewTypes {
		if at, ok := f.copy.At(i); ok {
			n = max(n, at)
		}
	}
	return n
}

// heard notes that kube-apiserver answered the kubelet's read of the
// view now.
func (f *viewFollower) heard() { f.trust.heardAt.Store(mono()) }

// sinceHeard is how long since kube-apiserver last answered a read of
// the view that the copy took in; false if never.
func (f *viewFollower) sinceHeard() (time.Duration, bool) {
	at := f.trust.heardAt.Load()
	if at == 0 {
		return 0, false
	}
	return time.Duration(mono() - at), true
}

// distrust notes that the node was served something of its view that
// the copy could not take in. If the view's channel is open, a progress
// request brings the copy past this moment, which trusts it again.
func (f *viewFollower) distrust(reason string, err error) {
	now := mono()
	f.trust.distrustedAt.Store(now)
	unobserved.WithLabelValues(reason).Inc()
	// Never the object, which may be a secret: err names what failed.
	klog.ErrorS(err, "Could not take in what the kubelet was served of its node's view; the copy serves nothing offline until the hub brings it past this", "reason", reason)
	go func() {
		if f.sync(context.Background()) == nil {
			f.trustSince(now)
		}
	}()
}

// trustSince trusts the copy again if nothing was distrusted after t:
// the copy holds what the hub had after it.
func (f *viewFollower) trustSince(t int64) {
	if at := f.trust.distrustedAt.Load(); at != 0 && at <= t && f.trust.distrustedAt.CompareAndSwap(at, 0) {
		klog.InfoS("The node's copy holds what the hub has again; it may be served offline")
	}
}

// vouched reports whether the copy took in everything the node was
// served of its view.
func (f *viewFollower) vouched() bool { return f.trust.distrustedAt.Load() == 0 }
