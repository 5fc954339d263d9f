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
// kube-apiserver, which answers a bad token with its own 401. A token the
// hub refuses (401: it no longer authenticates), at a dial or by closing
// its connection (the hub re-authenticates every connection at least once
// a minute), leaves the table at once, its session ends rather than
// redialing, and it is not dialed again until kube-apiserver accepts it
// again: serves it a watch (vouched, below: the sweep dials it) or answers
// one of its reads the hub could serve (then a read dials it, at its
// backoff). Until then its reads, new and repeated,
// go to kube-apiserver, which answers them as it answers the token. Each time
// a token's connection is up (its first dial, a redial, its session's
// own redial after the hub went), the token's proxied watches are ended
// (returned), so that the client watches again, from its last
// resourceVersion, through the hub. A rotated token (projected
// ServiceAccount tokens are replaced about hourly) is a new connection
// for the client's new requests; the old one keeps the watches opened
// with it until they end, and is closed once idle. A watch that ends
// because its connection did (the token expired, the hub went) is
// watched again by the client from its last resourceVersion: nothing is
// lost.
//
// The table, against a local process making up tokens (any process on
// the node reaches the endpoint with any token):
//
//   - Only connections take a place: at most maxClientHubs. A token
//     whose dial failed is remembered apart (failed, at most
//     maxFailedTokens, the oldest forgotten first), so that its reads go
//     straight to kube-apiserver and it is dialed again only at its
//     backoff (clientRetry), at a read after it. No number of bad tokens
//     fills the table, and a token repeated costs one dial per backoff;
//     one the hub refused (401) costs none until kube-apiserver accepts
//     it again.
//   - At the limit, a new token's connection takes the place of the
//     connection unused longest with no request open (a client's
//     watches are requests open: kube-proxy's connection is never one);
//     when every connection has one, the new token's reads go to
//     kube-apiserver ("full").
//   - New tokens are dialed at most at clientDialRate, so that made-up
//     tokens cost the hub (and its TokenReviews) a bounded rate; past it
//     reads go to kube-apiserver ("throttled"). A flood of new tokens
//     above that rate uses all of it. A token kube-apiserver vouches for,
//     by serving a watch the hub could serve to it (it authenticated the
//     token and allowed the watch; a made-up token gets 401 there), is
//     dialed again by the sweep at a rate of its own (clientVouchedRate),
//     which no made-up token can spend: kube-proxy's new token reaches
//     the hub within clientSweepPeriod of its watches, flood or not, and
//     its proxied watches are then returned to the hub.
//
// Whatever is refused, the read goes to kube-apiserver with the
// client's own credential, as it would without the endpoint.
type clientHubs struct {
	cfg *rest.Config // the hub's address and CA, no credential
	// dialer connects a token to the hub (dialHub; tests replace it); up
	// is called each time the connection is up, refused once if the hub
	// refuses the token later (the connection then ends for good).
	dialer func(ctx context.Context, cfg *rest.Config, token string, up func(), refused func(error)) (clientConn, error)
	// limiter paces the dials of tokens nobody vouched for; vouched the
	// sweep's dials of tokens kube-apiserver serves a watch for.
	limiter, vouchedLimiter flowcontrol.RateLimiter
	now                     func() time.Time
	// connected is told the key of a connection each time it is up (the
	// first time included): the watches proxied meanwhile may come back.
	connected func(id string)

	mu sync.Mutex
	// ctx is Endpoint.Run's: connections live as long as it. Nil until
	// run: reads go to kube-apiserver.
	ctx     context.Context          // guarded by mu
	conns   map[string]*clientHub    // guarded by mu; by clientKey.id
	dialing map[string]chan struct{} // guarded by mu
	// failed are the tokens whose last dial failed, by clientKey.id;
	// vouched the tokens kube-apiserver serves a hub-servable watch for
	// that have no connection, to their token. Neither takes a place.
	failed  map[string]*failedToken  // guarded by mu
	vouched map[string]*vouchedToken // guarded by mu
}

// clientConn is a client's hub connection: *Hub.
type clientConn interface {
	Connected() bool
	close()
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

// clientHub is one token's connection.
type clientHub struct {
	conn clientConn
	// asked: a new read with its token is put to kube-apiserver first
	// (tokenAsked), decided once, when the connection is recorded,
	// rather than by parsing the token at every read.
	asked bool
	// active counts the requests being served with conn; lastUsed is
	// when the last one began. A connection with none for
	// clientIdleTimeout is closed.
	active   int
	lastUsed time.Time
}

// failedToken is what is remembered of a token whose dial failed: not
// the token, only when it may be dialed again.
type failedToken struct {
	failures int
	retryAt  time.Time
	// refused: the hub's last answer was 401, the token no longer
	// authenticates; only kube-apiserver accepting it again (vouch,
	// accepted) has it dialed again.
	refused  bool
	lastSeen time.Time // its last read; unused for clientIdleTimeout, it is forgotten
	added    time.Time // the oldest is forgotten first when failed is full
}

// vouchedToken is a token kube-apiserver serves a hub-servable watch
// for, without a connection: the sweep dials it.
type vouchedToken struct {
	token string
	since time.Time // the last watch kube-apiserver served it
}

const (
	// maxClientHubs bounds the connections: a node has one kube-proxy
	// (two tokens around a rotation) and a few other host-network
	// agents; each connection is a websocket and a session on the hub.
	maxClientHubs = 16
	// maxFailedTokens bounds the memory of failed dials: at the dial
	// rate, as many as arrive in about four minutes; a token forgotten
	// early is dialed again at its next read, which the dial rate paces.
	maxFailedTokens = 256
	// maxVouchedTokens bounds the tokens waiting for the sweep: each is
	// a token kube-apiserver accepted for a watch of a hub-served type,
	// which only the node's real clients have.
	maxVouchedTokens = 64
	clientDialRate   = 1 // per second
	clientDialBurst  = 8
	// clientVouchedRate and clientVouchedBurst pace the sweep's dials of
	// vouched tokens, apart from the rest.
	clientVouchedRate  = 1 // per second
	clientVouchedBurst = 4
	clientIdleTimeout  = 5 * time.Minute
	clientSweepPeriod  = 5 * time.Second
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
	clientDialFull         = "full"         // maxClientHubs connections, each with a request open
)

// Reasons the table lets an entry go, the values of the client hub
// evictions metric's "reason" label.
const (
	evictIdle   = "idle"   // a connection with no request for clientIdleTimeout, closed
	evictRoom   = "room"   // a connection with no request open, closed for a new client at maxClientHubs
	evictFailed = "failed" // a failed dial forgotten: unused, pushed out by newer ones, or the node's hub connection back
	// evictUnauthorized: a connection the hub closed because its token
	// no longer authenticates (or refused to take back on a redial), or
	// whose token kube-apiserver refused at a new read (refuseToken).
	evictUnauthorized = "unauthorized"
)

func newClientHubs(hub *rest.Config, connected func(id string)) *clientHubs {
	return &clientHubs{
		cfg:            rest.AnonymousClientConfig(hub),
		dialer:         dialHub,
		limiter:        flowcontrol.NewTokenBucketRateLimiter(clientDialRate, clientDialBurst),
		vouchedLimiter: flowcontrol.NewTokenBucketRateLimiter(clientVouchedRate, clientVouchedBurst),
		now:            time.Now,
		connected:      connected,
		conns:          map[string]*clientHub{},
		dialing:        map[string]chan struct{}{},
		failed:         map[string]*failedToken{},
		vouched:        map[string]*vouchedToken{},
	}
}

// run lets connections be made until ctx ends, closing idle ones and
// dialing vouched ones; then it closes them all.
func (c *clientHubs) run(ctx context.Context) {
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
	t := time.NewTicker(clientSweepPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.closeAll()
			return
		case <-t.C:
			c.sweep()
		}
	}
}

// sweep closes the connections idle for clientIdleTimeout, forgets the
// failed and vouched tokens unused as long, and dials, in the
// background, the vouched tokens whose backoff is over.
func (c *clientHubs) sweep() {
	now := c.now()
	var closing []clientConn
	c.mu.Lock()
	for id, ch := range c.conns {
		if ch.active == 0 && now.Sub(ch.lastUsed) >= clientIdleTimeout {
			delete(c.conns, id)
			closing = append(closing, ch.conn)
			clientEvictions.WithLabelValues(evictIdle).Inc()
		}
	}
	for id, f := range c.failed {
		if now.Sub(f.lastSeen) >= clientIdleTimeout && !now.Before(f.retryAt) {
			delete(c.failed, id)
			clientEvictions.WithLabelValues(evictFailed).Inc()
		}
	}
	for id, v := range c.vouched {
		if _, up := c.conns[id]; up || now.Sub(v.since) >= clientIdleTimeout {
			delete(c.vouched, id)
			continue
		}
		if _, busy := c.dialing[id]; busy || !c.mayDialLocked(id, now) || !c.hasRoomLocked() || !c.vouchedLimiter.TryAccept() {
			continue
		}
		done := make(chan struct{})
		c.dialing[id] = done
		go c.dial(c.ctx, clientKey{token: v.token, id: id}, done)
	}
	clientConnections.Set(float64(len(c.conns)))
	c.mu.Unlock()
	for _, conn := range closing {
		conn.close()
	}
}

// closeAll closes every connection and forgets every token.
func (c *clientHubs) closeAll() {
	c.mu.Lock()
	closing := make([]clientConn, 0, len(c.conns))
	for _, ch := range c.conns {
		closing = append(closing, ch.conn)
	}
	c.conns, c.failed, c.vouched = map[string]*clientHub{}, map[string]*failedToken{}, map[string]*vouchedToken{}
	clientConnections.Set(0)
	c.mu.Unlock()
	for _, conn := range closing {
		conn.close()
	}
}

// forgetFailures has every token whose dial failed dialed again at its
// next read: the hub is reachable now (the node's own connection is up),
// so a failure from when it was not says nothing any more. A token the
// hub refused is kept: that says something about the token, not the hub.
func (c *clientHubs) forgetFailures() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, f := range c.failed {
		if !f.refused {
			delete(c.failed, id)
			clientEvictions.WithLabelValues(evictFailed).Inc()
		}
	}
}

// vouch records that kube-apiserver serves key's token a watch the hub
// could serve: unless it has a connection, the sweep dials it.
func (c *clientHubs) vouch(key clientKey) {
	if key.id == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, up := c.conns[key.id]; up {
		return
	}
	c.acceptedLocked(key.id)
	now := c.now()
	if v, ok := c.vouched[key.id]; ok {
		v.since = now
		return
	}
	if len(c.vouched) >= maxVouchedTokens {
		c.dropOldestVouchedLocked()
	}
	c.vouched[key.id] = &vouchedToken{token: key.token, since: now}
}

// refused reports whether the hub refused id's token (401) and
// kube-apiserver has not accepted it since.
func (c *clientHubs) refused(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.failed[id]
	return ok && f.refused
}

// accepted records that kube-apiserver answered a hub-servable read with
// key's token (a 2xx, not a watch: vouch takes those): a token the hub
// refused is dialed again at a read once its backoff is over. A client
// that only lists comes back to the hub this way.
func (c *clientHubs) accepted(key clientKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.acceptedLocked(key.id)
}

func (c *clientHubs) acceptedLocked(id string) {
	if f, ok := c.failed[id]; ok {
		f.refused = false
	}
}

func (c *clientHubs) dropOldestVouchedLocked() {
	oldest := ""
	for id, v := range c.vouched {
		if oldest == "" || v.since.Before(c.vouched[oldest].since) {
			oldest = id
		}
	}
	delete(c.vouched, oldest)
}

// mayDialLocked reports whether id may be dialed at now: it never
// failed, or its backoff is over. A token the hub refused is dialed by a
// read only once kube-apiserver has accepted it since (accepted, vouch),
// by the sweep only once vouched for after the refusal (which forgot
// every vouch before it).
func (c *clientHubs) mayDialLocked(id string, now time.Time) bool {
	f, ok := c.failed[id]
	return !ok || !now.Before(f.retryAt)
}

// hasRoomLocked reports whether a new connection would find a place:
// below the limit (dials under way counted), or one connection has no
// request open.
func (c *clientHubs) hasRoomLocked() bool {
	if len(c.conns)+len(c.dialing) < maxClientHubs {
		return true
	}
	for _, ch := range c.conns {
		if ch.active == 0 {
			return true
		}
	}
	return false
}

// makeRoomLocked closes (returns, for the caller to close outside the
// lock) the connection unused longest with no request open, if the
// table is at its limit; false if there is none to close.
func (c *clientHubs) makeRoomLocked() (clientConn, bool) {
	if len(c.conns) < maxClientHubs {
		return nil, true
	}
	victim := ""
	for id, ch := range c.conns {
		if ch.active == 0 && (victim == "" || ch.lastUsed.Before(c.conns[victim].lastUsed)) {
			victim = id
		}
	}
	if victim == "" {
		return nil, false
	}
	conn := c.conns[victim].conn
	delete(c.conns, victim)
	clientEvictions.WithLabelValues(evictRoom).Inc()
	return conn, true
}

// acquire returns the hub connection of key, dialing it if it has none,
// or nil when the read should go to kube-apiserver, and whether the read
// is put to kube-apiserver's token check first (clientHub.asked); a
// non-nil release must be called when the read is done.
func (c *clientHubs) acquire(ctx context.Context, key clientKey) (clientConn, bool, func()) {
	if key.id == "" {
		return nil, false, nil
	}
	for {
		c.mu.Lock()
		if c.ctx == nil {
			c.mu.Unlock()
			return nil, false, nil
		}
		if ch, ok := c.conns[key.id]; ok {
			defer c.mu.Unlock()
			if !ch.conn.Connected() {
				return nil, false, nil // its session dials again
			}
			ch.active++
			ch.lastUsed = c.now()
			conn := ch.conn
			return conn, ch.asked, func() { c.release(key.id, conn) }
		}
		wait, dialing := c.dialing[key.id]
		if !dialing {
			break // c.mu is held
		}
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, false, nil
		}
	}
	// c.mu is held, and no one dials this token.
	now := c.now()
	if f, ok := c.failed[key.id]; ok {
		f.lastSeen = now
		if f.refused || now.Before(f.retryAt) {
			c.mu.Unlock()
			return nil, false, nil // not a dial: no result counted
		}
	}
	result := ""
	switch {
	case !c.hasRoomLocked():
		result = clientDialFull
	case !c.limiter.TryAccept():
		result = clientDialThrottled
	}
	if result != "" {
		c.mu.Unlock()
		clientDials.WithLabelValues(result).Inc()
		return nil, false, nil
	}
	done := make(chan struct{})
	c.dialing[key.id] = done
	runCtx := c.ctx
	c.mu.Unlock()

	conn := c.dial(runCtx, key, done)
	if conn == nil {
		return nil, false, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.conns[key.id]; ok && ch.conn == conn {
		ch.active++
		ch.lastUsed = c.now()
		return conn, ch.asked, func() { c.release(key.id, conn) }
	}
	return nil, false, nil // closed meanwhile
}

// dial connects key's token to the hub and records the connection, or
// the failure; done is closed (and dropped from dialing) when it is
// recorded. It returns the connection, nil on failure or when the table
// had no room left for it.
func (c *clientHubs) dial(ctx context.Context, key clientKey, done chan struct{}) clientConn {
	d := &clientDial{}
	conn, err := c.dialer(ctx, c.cfg, key.token, func() { c.connected(key.id) }, func(err error) { c.refuse(key.id, d, err) })
	var closing clientConn
	defer func() {
		if closing != nil {
			closing.close()
		}
	}()
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.dialing, key.id)
	close(done)
	if err != nil {
		result := clientDialError
		switch {
		case apierrors.IsUnauthorized(err):
			result = clientDialUnauthorized
		case apierrors.IsForbidden(err):
			result = clientDialForbidden
		}
		clientDials.WithLabelValues(result).Inc()
		c.failLocked(key.id, result, err)
		return nil
	}
	if d.refused {
		// The hub refused the token already, before it was recorded.
		closing = conn
		return nil
	}
	victim, ok := c.makeRoomLocked()
	if !ok {
		// Every place was taken, by connections in use, while it dialed.
		clientDials.WithLabelValues(clientDialFull).Inc()
		closing = conn
		return nil
	}
	closing = victim
	clientDials.WithLabelValues("ok").Inc()
	delete(c.failed, key.id)
	delete(c.vouched, key.id)
	c.conns[key.id] = &clientHub{conn: conn, asked: tokenAsked(key.token), lastUsed: c.now()}
	d.conn = conn
	clientConnections.Set(float64(len(c.conns)))
	return conn
}

// clientDial is one connection of a token, as its refusal finds it.
type clientDial struct {
	conn    clientConn // guarded by clientHubs.mu; nil until recorded
	refused bool       // guarded by clientHubs.mu
}

// refuse takes the connection d out of the table: the hub closed it
// because its token no longer authenticates, or refused it on a redial,
// and its session has ended. The token is remembered as refused, so that
// its reads go to kube-apiserver, which words the 401, and it is not
// dialed again until kube-apiserver serves it a watch again (vouch).
func (c *clientHubs) refuse(id string, d *clientDial, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d.refused = true
	if ch, ok := c.conns[id]; ok && d.conn != nil && ch.conn == d.conn {
		delete(c.conns, id)
		clientEvictions.WithLabelValues(evictUnauthorized).Inc()
		clientConnections.Set(float64(len(c.conns)))
	}
	c.failLocked(id, clientDialUnauthorized, err)
}

// refuseToken takes id's connection out of the table and closes it:
// kube-apiserver refused its token at a new read (tokenCheck), which the
// hub will see at its next check. The token is remembered as refused, as
// when the hub refuses it (refuse), so that its reads go to
// kube-apiserver until it accepts the token again; its open watches end
// with the connection, and come back through kube-apiserver, which
// answers them as it answers the token.
func (c *clientHubs) refuseToken(id string, err error) {
	c.mu.Lock()
	var closing clientConn
	if ch, ok := c.conns[id]; ok {
		delete(c.conns, id)
		closing = ch.conn
		clientEvictions.WithLabelValues(evictUnauthorized).Inc()
		clientConnections.Set(float64(len(c.conns)))
	}
	c.failLocked(id, clientDialUnauthorized, err)
	c.mu.Unlock()
	if closing != nil {
		closing.close()
	}
}

// failLocked remembers that id's dial failed, forgetting the oldest
// failure if the memory is full.
func (c *clientHubs) failLocked(id, result string, err error) {
	now := c.now()
	f, ok := c.failed[id]
	if !ok {
		if len(c.failed) >= maxFailedTokens {
			oldest := ""
			for id, f := range c.failed {
				if oldest == "" || f.added.Before(c.failed[oldest].added) {
					oldest = id
				}
			}
			delete(c.failed, oldest)
			clientEvictions.WithLabelValues(evictFailed).Inc()
		}
		f = &failedToken{added: now}
		c.failed[id] = f
	}
	f.failures++
	f.lastSeen = now
	f.retryAt = now.Add(clientRetry(f.failures))
	f.refused = result == clientDialUnauthorized
	if f.refused {
		// A vouch from before the refusal says nothing of the token now.
		delete(c.vouched, id)
	}
	klog.V(2).InfoS("Hub refused or unreachable for a client of the node; its reads go to kube-apiserver", "result", result, "retryIn", clientRetry(f.failures), "err", err)
}

// release ends a request served with conn, id's connection.
func (c *clientHubs) release(id string, conn clientConn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.conns[id]; ok && ch.conn == conn && ch.active > 0 {
		ch.active--
	}
}

// dialHub connects to the hub at cfg with token as the credential, once,
// synchronously; the session then redials by itself, and calls up each
// time it has a connection up, until the hub refuses the token (it closes
// the connection for it, or refuses a redial with 401): then the session
// ends, and calls refused.
func dialHub(ctx context.Context, cfg *rest.Config, token string, up func(), refused func(error)) (clientConn, error) {
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
		}),
		watchmux.WithEndOnUnauthorized(refused))
	if err != nil {
		return nil, err
	}
	h.session = s
	return h, nil
}
