package watch

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/bulk"
)

// UnwatchedReauthorizeInterval is how often every channel is authorized
// again while nobody tells the Watcher of RBAC's changes (RBACWatched not
// yet called: the hub's RBAC informers have not listed, for instance
// because its ServiceAccount may not read RBAC): a removed binding then
// still ends a channel within a minute and the authorizer's cache TTL.
const UnwatchedReauthorizeInterval = time.Minute

// Why a round ran, the values of the rounds metric's reason label.
const (
	reasonRBACChange = "rbac_change"
	reasonPeriodic   = "periodic"
	reasonUnwatched  = "rbac_unwatched"
)

// reauthorizeRetry is how soon the channels of a user whose check could
// not be made (kube-apiserver unreachable or slow) are asked about again:
// with rounds only after changes, nothing else would ask before the
// connection's maximum age, and a binding deleted during an outage would
// keep its channels open that long. The reauthenticator's retry is the
// same.
const reauthorizeRetry = 10 * time.Second

// reauthorizer asks again whether each open channel of a user other than
// a node, or of a node on a type the graph does not decide (its rights
// there are kube-apiserver's to decide, through RBAC or whatever else it
// delegates to), may still watch what it selects, and closes with ERROR
// 403 those it no longer may. A node's channels on the graph's types need
// none of this: the graph's changes close them the moment access is lost
// (revocations).
//
// kube-apiserver authorizes a watch once, when it starts, and again only
// when the client reopens it, after 30 to 60 minutes. nodeproxy's channels
// live as long as their connection (the hub's --watch-max-connection-age,
// hours, or --watch-max-aggregated-connection-age through the
// aggregator, after which the client reopens them and they are
// authorized afresh), so the reauthorizer asks in between, but only when
// an answer may have changed:
//   - after an RBAC change that names the channel's user (Recheck): once
//     past the authorizer's cached answer, and once more later, since
//     kube-apiserver's own RBAC informers may hear of the change after the
//     hub's (Options.RBACRecheckAfter);
//   - every Options.ReauthorizeInterval, jittered, if set: for an
//     authorizer the hub cannot watch (a webhook, ABAC);
//   - every UnwatchedReauthorizeInterval until RBACWatched is called;
//   - reauthorizeRetry after a check that could not be made, for that
//     channel's user (a round of reason rbac_change).
//
// One goroutine asks, one channel at a time: a round over many channels
// takes longer rather than sending kube-apiserver a burst. An authorizer
// error keeps the channel (it was allowed, and is not allowed anything
// new) and is counted, and its user is asked about again soon.
type reauthorizer struct {
	catalog  *bulk.Catalog
	interval time.Duration // periodic rounds; 0: none
	now      func() time.Time
	// wake tells run that a round was planned; buffered so that Recheck
	// never waits for a round in progress.
	wake    chan struct{}
	watched atomic.Bool

	mu       sync.Mutex
	streams  map[*stream]user.Info // guarded by mu
	schedule recheckSchedule       // guarded by mu
}

func newReauthorizer(c *bulk.Catalog, interval time.Duration, recheckAfter []time.Duration) *reauthorizer {
	return &reauthorizer{catalog: c, interval: interval, now: time.Now, wake: make(chan struct{}, 1),
		streams: map[*stream]user.Info{}, schedule: recheckSchedule{delays: recheckAfter, coalesce: recheckCoalesce}}
}

func (r *reauthorizer) add(s *stream, u user.Info) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.streams[s] = u
}

func (r *reauthorizer) remove(s *stream) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.streams, s)
}

// recheck plans the rounds for an RBAC change, seen at seen, that may
// concern the channels of subjects.
func (r *reauthorizer) recheck(subjects Subjects, seen time.Time) {
	if subjects.Empty() {
		return
	}
	r.mu.Lock()
	r.schedule.add(subjects, seen)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// jitter spreads periodic rounds of replicas started together over the
// last quarter of the interval.
func jitter(d time.Duration) time.Duration { return d - time.Duration(rand.Int64N(int64(d/4)+1)) }

// run runs each round when it is due, one at a time, until ctx ends: a
// periodic or unwatched round over every channel takes the RBAC rounds
// due with it.
func (r *reauthorizer) run(ctx context.Context) {
	start := r.now()
	nextUnwatched := start.Add(UnwatchedReauthorizeInterval)
	var nextPeriodic time.Time
	if r.interval > 0 {
		nextPeriodic = start.Add(jitter(r.interval))
	}
	for {
		now := r.now()
		next := now.Add(time.Hour) // nothing planned: woken by recheck
		if !nextPeriodic.IsZero() && nextPeriodic.Before(next) {
			next = nextPeriodic
		}
		if !r.watched.Load() && nextUnwatched.Before(next) {
			next = nextUnwatched
		}
		r.mu.Lock()
		if at, ok := r.schedule.next(); ok && at.Before(next) {
			next = at
		}
		r.mu.Unlock()
		t := time.NewTimer(next.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-r.wake:
			t.Stop()
			continue
		case <-t.C:
		}
		now = r.now()
		r.mu.Lock()
		subjects, changed := r.schedule.due(now)
		r.mu.Unlock()
		switch {
		case !nextPeriodic.IsZero() && !now.Before(nextPeriodic):
			// Every channel, so the changes due too.
			r.round(ctx, reasonPeriodic, everyone)
			nextPeriodic = r.now().Add(jitter(r.interval))
		case !r.watched.Load() && !now.Before(nextUnwatched):
			r.round(ctx, reasonUnwatched, everyone)
			nextUnwatched = r.now().Add(UnwatchedReauthorizeInterval)
		case changed:
			r.round(ctx, reasonRBACChange, subjects.Matches)
		}
	}
}

// everyone matches every channel's user: a round over them all.
func everyone(user.Info) bool { return true }

// round authorizes again every registered channel whose user matches.
func (r *reauthorizer) round(ctx context.Context, reason string, matches func(user.Info) bool) {
	r.mu.Lock()
	streams := make(map[*stream]user.Info, len(r.streams))
	for s, u := range r.streams {
		if matches(u) {
			streams[s] = u
		}
	}
	r.mu.Unlock()
	var denied, failed int
	retry := Subjects{Users: sets.New[string]()}
	for s, u := range streams {
		if ctx.Err() != nil {
			return
		}
		if s.dead.Load() {
			continue
		}
		err := r.catalog.Authorize(ctx, u, s.q)
		switch {
		case err == nil:
			reauthorizations.WithLabelValues("allowed").Inc()
		case apierrors.IsForbidden(err):
			denied++
			reauthorizations.WithLabelValues("denied").Inc()
			s.dead.Store(true)
			s.sink.Close(&metav1.Status{
				Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
				Message: "access lost: " + err.Error(),
			})
		default:
			failed++
			retry.Users.Insert(u.GetName())
			reauthorizations.WithLabelValues("error").Inc()
			klog.ErrorS(err, "Authorizing an open bulk watch channel again; keeping it, and asking again soon", "user", u.GetName(), "in", reauthorizeRetry)
		}
	}
	if failed > 0 {
		r.mu.Lock()
		r.schedule.plan(retry, r.now().Add(reauthorizeRetry))
		r.mu.Unlock()
	}
	reauthorizationRounds.WithLabelValues(reason).Inc()
	klog.V(2).InfoS("Authorized open bulk watch channels again", "reason", reason, "channels", len(streams), "denied", denied, "errors", failed)
}
