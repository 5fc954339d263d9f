package endpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/watchmux"
)

// clientHubs are the hub connections of the node's other clients
// (kube-proxy first), one per bearer token: a client's channels carry
// its own credential to the hub, which authenticates it and asks
// kube-apiserver whether it may read what it asks, exactly as
// kube-apiserver would. The node's certificate is never lent to them.
//
// A connection is dialed by the first hub-served read with a token, in
// that read, so that the read is served by the hub rather than sent to
// kube-apiserver while a dial runs in the background. A dial that fails
// (the hub unreachable, the token refused) sends the token's reads to
// kube-apiserver, which answers a bad token with its own 401; the dial is
// tried again in the background after a backoff (clientRetry). Each time
// a token's connection is up (its first dial, a redial after a failure,
// its session's own redial after the hub went), the token's proxied
// watches are ended (returned), so that the client watches again, from
// its last resourceVersion, through the hub. A rotated token (projected ServiceAccount tokens are replaced
// about hourly) is a new connection for the client's new requests; the
// old one keeps the watches opened with it until they end, and is closed
// once idle. A watch that ends because its connection did (the token
// expired, the hub went) is watched again by the client from its last
// resourceVersion: nothing is lost.
//
// Bounds, against a local process making up tokens: at most
// maxClientHubs tokens known (connected or failed), and new dials at
// clientDialRate; past them reads go to kube-apiserver, whose own limits
// then apply, as they would without the endpoint.
type clientHubs struct {
	cfg     *rest.Config // the hub's address and CA, no credential
	limiter flowcontrol.RateLimiter
	now     func() time.Time
	// connected is told the key of a connection each time it is up (the
	// first time included): the watches proxied meanwhile may come back.
	connected func(id string)

	mu sync.Mutex
	// ctx is Endpoint.Run's: connections live as long as it. Nil until
	// run: reads go to kube-apiserver.
	ctx     context.Context          // guarded by mu
	byToken map[string]*clientHub    // guarded by mu; by clientKey.id
	dialing map[string]chan struct{} // guarded by mu
}

// clientKey is a caller's credential: its bearer token, and the token's
// digest, which names it everywhere else (maps, the proxied watches).
type clientKey struct{ token, id string }

// bearerToken is req's bearer token, as kube-apiserver's token
// authenticator reads the header; false if it has none.
func bearerToken(req *http.Request) (string, bool) {
	auth := strings.TrimSpace(req.Header.Get("Authorization"))
	scheme, token, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// keyOf is req's bearer token and its digest; the zero key if it has
// none.
func keyOf(req *http.Request) clientKey {
	token, ok := bearerToken(req)
	if !ok {
		return clientKey{}
	}
	sum := sha256.Sum256([]byte(token))
	return clientKey{token: token, id: hex.EncodeToString(sum[:])}
}

// clientHub is one token's connection, or its failure.
type clientHub struct {
	hub *Hub // nil after a failed dial
	// After a failed dial: the token, to dial again at retryAt, and how
	// many dials failed in a row.
	token    string
	retryAt  time.Time
	failures int
	// active counts the requests being served with hub; lastUsed is
	// when the last one began. A connection with none for
	// clientIdleTimeout is closed.
	active   int
	lastUsed time.Time
}

const (
	maxClientHubs     = 16
	clientDialRate    = 1 // per second
	clientDialBurst   = 8
	clientIdleTimeout = 5 * time.Minute
	clientSweepPeriod = 5 * time.Second
)

// clientRetry is how long after failures failed dials in a row a token is
// dialed again: 5 s doubling to 5 minutes. A hub unreachable for a moment
// (a node booting, before kube-proxy's rules let the endpoint reach it)
// is retried soon; a token the hub keeps refusing costs a dial every 5
// minutes.
func clientRetry(failures int) time.Duration {
	d := 5 * time.Second
	for range min(failures-1, 6) {
		d *= 2
	}
	return min(d, 5*time.Minute)
}

// Results of a client's dial, the values of the client hub dials
// metric's "result" label besides "ok". For all of them the client's
// reads go to kube-apiserver.
const (
	clientDialUnauthorized = "unauthorized" // the hub refused the token: kube-apiserver words the 401
	clientDialForbidden    = "forbidden"    // the client may not use the bulk API: kube-apiserver decides its reads
	clientDialError        = "error"        // the hub could not be dialed
	clientDialThrottled    = "throttled"    // past clientDialRate
	clientDialFull         = "full"         // maxClientHubs tokens known
)

func newClientHubs(hub *rest.Config, connected func(id string)) *clientHubs {
	return &clientHubs{
		cfg:       rest.AnonymousClientConfig(hub),
		limiter:   flowcontrol.NewTokenBucketRateLimiter(clientDialRate, clientDialBurst),
		now:       time.Now,
		connected: connected,
		byToken:   map[string]*clientHub{},
		dialing:   map[string]chan struct{}{},
	}
}

// run lets connections be made until ctx ends, closing idle ones and
// dialing failed ones again; then it closes them all.
func (c *clientHubs) run(ctx context.Context) {
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
	t := time.NewTicker(clientSweepPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.sweep(true)
			return
		case <-t.C:
			c.sweep(false)
		}
	}
}

// sweep closes the connections idle for clientIdleTimeout, or all, and
// dials the failed tokens whose retry time has come, in the background.
func (c *clientHubs) sweep(all bool) {
	now := c.now()
	var closing []*Hub
	c.mu.Lock()
	for id, ch := range c.byToken {
		switch {
		case ch.hub == nil && all:
			delete(c.byToken, id)
		case ch.hub == nil && !now.Before(ch.retryAt):
			if _, busy := c.dialing[id]; busy || !c.limiter.TryAccept() {
				continue
			}
			done := make(chan struct{})
			c.dialing[id] = done
			go c.dial(c.ctx, clientKey{token: ch.token, id: id}, done)
		case ch.hub != nil && (all || ch.active == 0 && now.Sub(ch.lastUsed) >= clientIdleTimeout):
			delete(c.byToken, id)
			closing = append(closing, ch.hub)
		}
	}
	clientConnections.Set(float64(c.openLocked()))
	c.mu.Unlock()
	for _, h := range closing {
		h.close()
	}
}

// forgetFailures has every token whose dial failed dialed again at its
// next read: the hub is reachable now (the node's own connection is up),
// so a failure from when it was not says nothing any more.
func (c *clientHubs) forgetFailures() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, ch := range c.byToken {
		if ch.hub == nil {
			delete(c.byToken, id)
		}
	}
}

// openLocked counts the open connections.
func (c *clientHubs) openLocked() int {
	n := 0
	for _, ch := range c.byToken {
		if ch.hub != nil {
			n++
		}
	}
	return n
}

// acquire returns the hub connection of key, dialing it if it has none,
// or nil when the read should go to kube-apiserver; a non-nil release
// must be called when the read is done.
func (c *clientHubs) acquire(ctx context.Context, key clientKey) (*Hub, func()) {
	if key.id == "" {
		return nil, nil
	}
	for {
		c.mu.Lock()
		if c.ctx == nil {
			c.mu.Unlock()
			return nil, nil
		}
		if ch, ok := c.byToken[key.id]; ok {
			defer c.mu.Unlock()
			if ch.hub == nil || !ch.hub.Connected() {
				return nil, nil // the sweep dials it again in time
			}
			ch.active++
			ch.lastUsed = c.now()
			return ch.hub, func() { c.release(key.id) }
		}
		wait, dialing := c.dialing[key.id]
		if !dialing {
			break // c.mu is held
		}
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, nil
		}
	}
	// c.mu is held, and no one dials this token.
	result := ""
	switch {
	case len(c.byToken)+len(c.dialing) >= maxClientHubs:
		result = clientDialFull
	case !c.limiter.TryAccept():
		result = clientDialThrottled
	}
	if result != "" {
		c.mu.Unlock()
		clientDials.WithLabelValues(result).Inc()
		return nil, nil
	}
	done := make(chan struct{})
	c.dialing[key.id] = done
	runCtx := c.ctx
	c.mu.Unlock()

	h := c.dial(runCtx, key, done)
	if h == nil {
		return nil, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.byToken[key.id]; ok && ch.hub == h {
		ch.active++
		ch.lastUsed = c.now()
	}
	return h, func() { c.release(key.id) }
}

// dial connects key's token to the hub and records the connection, or
// the failure; done is closed (and dropped from dialing) when it is
// recorded. It returns the hub, nil on failure.
func (c *clientHubs) dial(ctx context.Context, key clientKey, done chan struct{}) *Hub {
	h, err := dialHub(ctx, c.cfg, key.token, func() { c.connected(key.id) })
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.dialing, key.id)
	close(done)
	failures := 0
	if prev, ok := c.byToken[key.id]; ok {
		failures = prev.failures
	}
	if err != nil {
		result := clientDialError
		switch {
		case apierrors.IsUnauthorized(err):
			result = clientDialUnauthorized
		case apierrors.IsForbidden(err):
			result = clientDialForbidden
		}
		retry := clientRetry(failures + 1)
		klog.V(2).InfoS("Hub refused or unreachable for a client of the node; its reads go to kube-apiserver", "result", result, "retryIn", retry, "err", err)
		clientDials.WithLabelValues(result).Inc()
		c.byToken[key.id] = &clientHub{token: key.token, failures: failures + 1, retryAt: c.now().Add(retry)}
		return nil
	}
	clientDials.WithLabelValues("ok").Inc()
	c.byToken[key.id] = &clientHub{hub: h, lastUsed: c.now()}
	clientConnections.Set(float64(c.openLocked()))
	return h
}

func (c *clientHubs) release(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.byToken[id]; ok && ch.active > 0 {
		ch.active--
	}
}

// dialHub connects to the hub at cfg with token as the credential, once,
// synchronously; the session then redials by itself, and calls up each
// time it has a connection up.
func dialHub(ctx context.Context, cfg *rest.Config, token string, up func()) (*Hub, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.BearerToken = token
	h, err := NewHub(cfg)
	if err != nil {
		return nil, err
	}
	s, err := watchmux.NewSession(ctx, h.cfg, watchmux.WithResumeTimeout(hubResumeTimeout),
		watchmux.WithConnectionObserver(func(connected bool) {
			if connected {
				up()
			}
		}))
	if err != nil {
		return nil, err
	}
	h.session = s
	return h, nil
}
