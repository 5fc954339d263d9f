package bulk

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/cache"
)

// freshnessTimeout is how long a request at a resourceVersion newer than
// the cache waits for the cache to catch up, the same 3 s kube-apiserver's
// watch cache waits before answering 504 "Too large resource version".
// The cache trails kube-apiserver by one watch delivery (milliseconds);
// a longer wait means the version comes from elsewhere.
const freshnessTimeout = 3 * time.Second

// StoreLagAllowance is how long a watch resumed ahead of the cache waits
// for the cache alone before asking kube-apiserver whether the version is
// real. Every hub replica's watch of a type gets an event from
// kube-apiserver's watch cache in the same dispatch, so a version another
// replica has seen from an event reaches this one within a millisecond or
// so; one it saw in a bookmark may be a minute away (each replica's watch
// gets its own, about a minute apart), and only the question settles it.
// 10 ms is several times the worst lag between replicas measured, and a
// tenth of what made quiet resumes ten times slower (docs/benchmarks.md,
// "Resume ahead of the cache"). Waiting longer only delays those resumes;
// waiting less than the lag costs one more question, shared by every
// resume of the type.
const StoreLagAllowance = 10 * time.Millisecond

// What a request waits for the cache for: a read needs the state at a
// version (a list, or a channel's initial state), a resume only the
// changes after it (a watch from a resourceVersion).
const (
	waitRead   = "read"
	waitResume = "resume"
)

// How a wait for the cache ended.
const (
	// waitCaughtUp: the cache reached the version within the bound.
	waitCaughtUp = "caught_up"
	// waitVouched: the cache had not reached it, kube-apiserver had; the
	// channel joined ahead of the cache.
	waitVouched = "vouched"
	// waitTooLarge: 504 after the bound; kube-apiserver had not reached
	// the version either (a resume), or was not asked (a read).
	waitTooLarge = "too_large"
	// waitUnchecked: 504 after the bound; kube-apiserver could not be
	// asked whether it had reached the version (a resume).
	waitUnchecked = "unchecked"
	// waitGone: the request ended while it waited.
	waitGone = "gone"
)

// ReadAt returns a state of s at rv or later, waiting for the cache to
// reach rv for at most freshnessTimeout, then 504 "Too large resource
// version", as kube-apiserver's watch cache does. It does not ask
// kube-apiserver: knowing that rv is real would not tell which of the
// type's changes up to rv the cache still lacks, and a read at rv must
// include all of them. The node endpoint sends a read refused with 504
// to kube-apiserver.
func ReadAt(ctx context.Context, s *cache.Store, rv uint64) (*cache.Snapshot, error) {
	snap := s.Snapshot()
	if snap.RV >= rv {
		return snap, nil
	}
	snap, err := awaitVersion(ctx, s, rv, time.Now().Add(freshnessTimeout))
	switch {
	case err == nil:
		observeVersionWait(s, waitRead, waitCaughtUp)
	case ctx.Err() != nil:
		observeVersionWait(s, waitRead, waitGone)
	default:
		observeVersionWait(s, waitRead, waitTooLarge)
	}
	return snap, err
}

// ResumeAt decides whether a watch may resume on s from rv: nil once the
// cache has reached rv, or once kube-apiserver says it has (then the
// client already holds every change up to rv, and the cache delivers
// those after rv as it takes them in, so the channel may join ahead of
// it). It waits StoreLagAllowance for the cache, then asks kube-apiserver
// (latest; nil: never asked), then waits for the cache up to
// freshnessTimeout in all, then 504 "Too large resource version": a
// version kube-apiserver has not reached comes from the future or from
// another cluster, and one kube-apiserver cannot vouch for is treated as
// kube-apiserver's own watch cache treats it.
func ResumeAt(ctx context.Context, s *cache.Store, rv uint64, latest *LatestChecker) error {
	if s.Snapshot().RV >= rv {
		return nil
	}
	deadline := time.Now().Add(freshnessTimeout)
	if _, err := awaitVersion(ctx, s, rv, time.Now().Add(StoreLagAllowance)); err == nil {
		observeVersionWait(s, waitResume, waitCaughtUp)
		return nil
	}
	unchecked := latest == nil
	if latest != nil {
		askCtx, cancel := context.WithDeadline(ctx, deadline)
		reached, err := latest.reached(askCtx, s.Resource, rv)
		cancel()
		switch {
		case err == nil && reached:
			observeVersionWait(s, waitResume, waitVouched)
			return nil
		case err != nil && ctx.Err() == nil:
			unchecked = true
		}
	}
	_, err := awaitVersion(ctx, s, rv, deadline)
	switch {
	case err == nil:
		observeVersionWait(s, waitResume, waitCaughtUp)
	case ctx.Err() != nil:
		observeVersionWait(s, waitResume, waitGone)
	case unchecked:
		observeVersionWait(s, waitResume, waitUnchecked)
		klog.V(2).InfoS("Refused a resume from a resourceVersion the cache has not reached; kube-apiserver could not be asked", "resource", s.Resource.Resource, "resourceVersion", rv, "cached", s.Snapshot().RV)
	default:
		observeVersionWait(s, waitResume, waitTooLarge)
		klog.V(2).InfoS("Refused a resume from a resourceVersion neither the cache nor kube-apiserver has reached", "resource", s.Resource.Resource, "resourceVersion", rv, "cached", s.Snapshot().RV)
	}
	return err
}

// awaitVersion waits until s has reached rv, or deadline, or ctx's end.
func awaitVersion(ctx context.Context, s *cache.Store, rv uint64, deadline time.Time) (*cache.Snapshot, error) {
	waitCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	snap, err := s.Await(waitCtx, rv)
	switch {
	case err == nil:
		return snap, nil
	case ctx.Err() != nil:
		return nil, apierrors.NewTimeoutError("request ended while waiting for the cache", 1)
	}
	return nil, tooLargeResourceVersion(rv, snap.RV)
}

// TooLargeResourceVersion is tooLargeResourceVersion, for the node view's
// resumes, which wait for the cache in their own way.
func TooLargeResourceVersion(rv, current uint64) error { return tooLargeResourceVersion(rv, current) }

// tooLargeResourceVersion is kube-apiserver's answer to a version its
// cache did not reach in time: 504 with the ResourceVersionTooLarge cause,
// which client-go's reflector takes as "list again from the latest".
func tooLargeResourceVersion(rv, current uint64) error {
	err := apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", rv, current), 1)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}
	return err
}
