package hub

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/klog/v2"
)

// canaries watch over what the local check cannot see: the configuration
// of kube-apiserver's authenticator (its issuers, its audiences, the keys
// it verifies signatures with, an external signer's keys among them). A
// key removed, or an issuer or audience dropped, refuses every token of
// the class at once while each still passes its local check.
//
// So, each re-check interval, one live token of each class (tokenClass:
// issuer, key ID, audiences) whose local check passes is reviewed by
// kube-apiserver through the shared TokenReview cache: the canary. Should
// it be refused, every token of its class is reviewed at once (at most
// classReviewConcurrency at a time, each token's connections sharing one
// review), those refused end with 401, and each goes on being reviewed,
// not checked locally, until a review accepts it again. A review that
// cannot be made (timeout, kube-apiserver unreachable) keeps the
// connection, which its own next check reviews.
//
// The cost: one TokenReview a class a re-check interval, whatever the
// number of connections: a cluster's kube-proxies share one class.
type canaries struct {
	check    func(context.Context, *credential) (*authenticator.Response, bool, error)
	interval time.Duration
	retry    time.Duration
	jitter   func(time.Duration) time.Duration

	mu      sync.Mutex
	classes map[tokenClass]*classMembers // guarded by mu
}

// classReviewConcurrency bounds the reviews in flight of a class whose
// canary was refused: every token of the class is reviewed at once, but
// kube-apiserver sees a few requests at a time, not a burst of one per
// token, and the class takes its number of tokens divided by this many
// round trips. Not measured: a choice between the two.
const classReviewConcurrency = 4

// classMembers are the connections of one class and the loop that
// reviews its canary, which runs while the class has a member.
type classMembers struct {
	members map[*member]struct{}
	stop    context.CancelFunc
}

// member is one connection whose token the local check decides.
type member struct {
	cred   *credential
	claims tokenClaims
	// first is the user the connection authenticated as (nil until a
	// review said).
	first atomic.Pointer[authenticator.Response]
	// passed: the latest local check allowed it; only such a token may be
	// a canary.
	passed atomic.Bool
	// distrusted: its class's canary was refused, and no review has
	// accepted it since: it is reviewed, not checked locally.
	distrusted atomic.Bool

	refused chan struct{} // closed once a review of the class refused it
	once    sync.Once
}

func newMember(cred *credential, claims tokenClaims, first *authenticator.Response) *member {
	m := &member{cred: cred, claims: claims, refused: make(chan struct{})}
	if first != nil {
		m.first.Store(first)
	}
	return m
}

// sameAs reports whether resp is the user m authenticated as; the first
// review of a connection that has none says who that is.
func (m *member) sameAs(resp *authenticator.Response) bool {
	if m.first.CompareAndSwap(nil, resp) {
		return true
	}
	return sameUser(m.first.Load(), resp)
}

func (m *member) refuse() { m.once.Do(func() { close(m.refused) }) }

// local reports whether m may be checked locally now.
func (m *member) local() bool { return m.whyNotLocal() == "" }

// whyNotLocal is why m may not be checked locally now, in a word
// (nodeproxy_hub_reauthentication_local_fallbacks_total), or "".
func (m *member) whyNotLocal() string {
	switch {
	case m.distrusted.Load():
		return fallbackDistrusted
	case !authenticatedAs(m.first.Load(), m.claims):
		return fallbackUnconfirmed
	}
	return ""
}

func newCanaries(check func(context.Context, *credential) (*authenticator.Response, bool, error), interval, retry time.Duration, jitter func(time.Duration) time.Duration) *canaries {
	return &canaries{check: check, interval: interval, retry: retry, jitter: jitter, classes: map[tokenClass]*classMembers{}}
}

// join adds m to its class, starting the class's canary if it is the
// first; the returned leave removes it.
func (c *canaries) join(m *member) (leave func()) {
	class := classOf(m.claims)
	c.mu.Lock()
	defer c.mu.Unlock()
	cm := c.classes[class]
	if cm == nil {
		ctx, stop := context.WithCancel(context.Background())
		cm = &classMembers{members: map[*member]struct{}{}, stop: stop}
		c.classes[class] = cm
		go c.run(ctx, class)
	}
	cm.members[m] = struct{}{}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(cm.members, m)
		if len(cm.members) == 0 && c.classes[class] == cm {
			cm.stop()
			delete(c.classes, class)
		}
	}
}

// membersOf is a copy of class's members.
func (c *canaries) membersOf(class tokenClass) []*member {
	c.mu.Lock()
	defer c.mu.Unlock()
	cm := c.classes[class]
	if cm == nil {
		return nil
	}
	out := make([]*member, 0, len(cm.members))
	for m := range cm.members {
		out = append(out, m)
	}
	return out
}

// run reviews a canary of class every interval until ctx ends.
func (c *canaries) run(ctx context.Context, class tokenClass) {
	next := c.jitter(c.interval)
	for {
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		next = c.jitter(c.interval)
		var canary *member
		for _, m := range c.membersOf(class) {
			if m.passed.Load() && m.local() {
				canary = m // the map's order: any of them
				break
			}
		}
		if canary == nil {
			continue // every token of the class is reviewed already
		}
		resp, ok, err := c.check(ctx, canary.cred)
		switch {
		case ctx.Err() != nil:
			return
		case !ok && transient(err):
			reauthentications.WithLabelValues(decidedByCanary, resultError).Inc()
			klog.ErrorS(err, "Reviewing a token class's canary; trying again", "issuer", class.issuer, "keyID", class.keyID)
			next = c.retry
		case !ok, !canary.sameAs(resp):
			reauthentications.WithLabelValues(decidedByCanary, resultUnauthorized).Inc()
			klog.InfoS("kube-apiserver refused a token its local check accepts; reviewing every token of its class",
				"issuer", class.issuer, "keyID", class.keyID, "audiences", class.audiences, "err", err)
			canary.refuse()
			c.reviewClass(ctx, class)
		default:
			reauthentications.WithLabelValues(decidedByCanary, resultOK).Inc()
		}
	}
}

// reviewClass reviews every member of class, classReviewConcurrency at
// a time, refusing those kube-apiserver refuses.
func (c *canaries) reviewClass(ctx context.Context, class tokenClass) {
	members := c.membersOf(class)
	for _, m := range members {
		m.distrusted.Store(true)
	}
	sem := make(chan struct{}, classReviewConcurrency)
	var wg sync.WaitGroup
	for _, m := range members {
		select {
		case <-m.refused:
			continue
		default:
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			resp, ok, err := c.check(ctx, m.cred)
			switch {
			case ctx.Err() != nil:
			case !ok && transient(err):
				reauthentications.WithLabelValues(decidedByReview, resultError).Inc()
			case !ok, !m.sameAs(resp):
				reauthentications.WithLabelValues(decidedByReview, resultUnauthorized).Inc()
				m.refuse()
			default:
				reauthentications.WithLabelValues(decidedByReview, resultOK).Inc()
				m.distrusted.Store(false)
			}
		})
	}
	wg.Wait()
}
