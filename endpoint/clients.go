package endpoint

import (
	"context"
	"crypto/sha256"
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
// kube-apiserver while a dial runs in the background. A token the hub
// refuses, or a hub that cannot be dialed, is remembered for
// clientRetryAfter: its reads go to kube-apiserver meanwhile, which
// answers a bad token with its own 401. A rotated token (projected
// ServiceAccount tokens are replaced about hourly) is a new connection
// for the client's new requests; the old one keeps the watches opened
// with it until they end, and is closed once idle. A watch that ends
// because its connection did (the token expired, the hub went) is
// watched again by the client from its last resourceVersion: nothing is
// lost.
//
// Bounds, against a local process making up tokens: at most
// maxClientHubs connections, and new dials at clientDialRate; past them
// reads go to kube-apiserver, whose own limits then apply, as they would
// without the endpoint.
type clientHubs struct {
	cfg     *rest.Config // the hub's address and CA, no credential
	limiter flowcontrol.RateLimiter
	now     func() time.Time

	mu sync.Mutex
	// ctx is Endpoint.Run's: connections live as long as it. Nil until
	// run: reads go to kube-apiserver.
	ctx     context.Context            // guarded by mu
	byToken map[[32]byte]*clientHub    // guarded by mu
	dialing map[[32]byte]chan struct{} // guarded by mu
}

// clientHub is one token's connection, or its failure.
type clientHub struct {
	hub *Hub // nil after a failed dial
	// retryAt is when a failed dial may be tried again.
	retryAt time.Time
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
	clientRetryAfter  = 30 * time.Second
	clientIdleTimeout = 5 * time.Minute
	clientSweepPeriod = time.Minute
)

// Reasons a client's hub-served read went to kube-apiserver, the values
// of the client hub dials metric's "result" label besides "ok".
const (
	clientDialUnauthorized = "unauthorized" // the hub refused the token: kube-apiserver words the 401
	clientDialForbidden    = "forbidden"    // the client may not use the bulk API: kube-apiserver decides its reads
	clientDialError        = "error"        // the hub could not be dialed
	clientDialThrottled    = "throttled"    // past clientDialRate
	clientDialFull         = "full"         // maxClientHubs connections open
)

func newClientHubs(hub *rest.Config) *clientHubs {
	cfg := rest.AnonymousClientConfig(hub)
	return &clientHubs{
		cfg:     cfg,
		limiter: flowcontrol.NewTokenBucketRateLimiter(clientDialRate, clientDialBurst),
		now:     time.Now,
		byToken: map[[32]byte]*clientHub{},
		dialing: map[[32]byte]chan struct{}{},
	}
}

// run lets connections be made until ctx ends, closing idle ones; then
// it closes them all.
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
// forgets failures past their retry time.
func (c *clientHubs) sweep(all bool) {
	now := c.now()
	var closing []*Hub
	c.mu.Lock()
	for k, ch := range c.byToken {
		switch {
		case ch.hub == nil && (all || !now.Before(ch.retryAt)):
			delete(c.byToken, k)
		case ch.hub != nil && (all || ch.active == 0 && now.Sub(ch.lastUsed) >= clientIdleTimeout):
			delete(c.byToken, k)
			closing = append(closing, ch.hub)
		}
	}
	clientConnections.Set(float64(c.openLocked()))
	c.mu.Unlock()
	for _, h := range closing {
		h.close()
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

// acquire returns the hub connection of req's bearer token, dialing it
// if it has none, or nil when the read should go to kube-apiserver; a
// non-nil release must be called when the read is done.
func (c *clientHubs) acquire(req *http.Request) (*Hub, func()) {
	token, ok := bearerToken(req)
	if !ok {
		return nil, nil
	}
	key := sha256.Sum256([]byte(token))
	for {
		c.mu.Lock()
		if c.ctx == nil {
			c.mu.Unlock()
			return nil, nil
		}
		if ch, ok := c.byToken[key]; ok && (ch.hub != nil || c.now().Before(ch.retryAt)) {
			defer c.mu.Unlock()
			if ch.hub == nil || !ch.hub.Connected() {
				return nil, nil
			}
			ch.active++
			ch.lastUsed = c.now()
			return ch.hub, func() { c.release(key) }
		}
		delete(c.byToken, key) // a failure past its retry time: dial again
		wait, dialing := c.dialing[key]
		if !dialing {
			break // c.mu is held
		}
		c.mu.Unlock()
		select {
		case <-wait:
		case <-req.Context().Done():
			return nil, nil
		}
	}
	// c.mu is held, and no one dials this token.
	result := ""
	switch {
	case c.openLocked()+len(c.dialing) >= maxClientHubs:
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
	c.dialing[key] = done
	ctx := c.ctx
	c.mu.Unlock()

	h, err := dialHub(ctx, c.cfg, token)

	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.dialing, key)
	close(done)
	if err != nil {
		result = clientDialError
		switch {
		case apierrors.IsUnauthorized(err):
			result = clientDialUnauthorized
		case apierrors.IsForbidden(err):
			result = clientDialForbidden
		}
		klog.V(2).InfoS("Hub refused or unreachable for a client of the node; its reads go to kube-apiserver", "result", result, "retryIn", clientRetryAfter, "err", err)
		clientDials.WithLabelValues(result).Inc()
		c.byToken[key] = &clientHub{retryAt: c.now().Add(clientRetryAfter)}
		return nil, nil
	}
	clientDials.WithLabelValues("ok").Inc()
	c.byToken[key] = &clientHub{hub: h, active: 1, lastUsed: c.now()}
	clientConnections.Set(float64(c.openLocked()))
	return h, func() { c.release(key) }
}

func (c *clientHubs) release(key [32]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.byToken[key]; ok && ch.active > 0 {
		ch.active--
	}
}

// bearerToken is req's bearer token, as kube-apiserver's token
// authenticator reads the header.
func bearerToken(req *http.Request) (string, bool) {
	auth := strings.TrimSpace(req.Header.Get("Authorization"))
	scheme, token, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// dialHub connects to the hub at cfg with token as the credential, once,
// synchronously.
func dialHub(ctx context.Context, cfg *rest.Config, token string) (*Hub, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.BearerToken = token
	h, err := NewHub(cfg)
	if err != nil {
		return nil, err
	}
	s, err := watchmux.NewSession(ctx, h.cfg, watchmux.WithResumeTimeout(hubResumeTimeout))
	if err != nil {
		return nil, err
	}
	h.session = s
	return h, nil
}
