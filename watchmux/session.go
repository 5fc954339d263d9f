package watchmux

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// Session is a bulk watch client that outlives its connections: when one
// ends (the hub shutting down sends ERROR 503 on every channel and closes;
// a killed hub's socket is reset; a vanished one goes silent until the
// idle timeout), it dials again, through the same address, and so
// possibly to another replica behind a Service, and reopens every channel
// from the last resourceVersion its consumer saw. resourceVersions are
// etcd's, the same on every replica, so a replica that holds the change in
// its log continues the channel with nothing lost and nothing repeated;
// one that does not answers ERROR 410, which the consumer sees, and then
// relists. Never a silent gap.
//
//	NewSession --dial--> Client --Channel--> pump --Events--> consumer
//	    ^  run: redial on Done,            |  remembers the last RV,
//	    '--------- with backoff -----------'  reopens on the next Client
//
// The plain Client is unchanged: a Session is built on it.
type Session struct {
	dial func(ctx context.Context) (*Client, error)
	o    sessionOptions

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when run has ended
	pumps  sync.WaitGroup

	mu      sync.Mutex
	conn    *Client       // guarded by mu; nil while redialing
	changed chan struct{} // guarded by mu: closed and replaced when conn changes
}

// SessionIdleTimeout is how long a Session waits to hear from its server
// before it takes the connection for dead and dials again. It pings every
// quarter of it, and the server answers a ping from
// its reader at once, so a live hub is heard from about four times per
// timeout even with no events, whatever its own --watch-ping-interval.
// 10 s: a hub killed outright is noticed at once anyway (its kernel
// resets the sockets); this bounds the failover when a hub's node or
// network vanishes, where TCP alone would take minutes. Its cost is a
// ping and a pong of a few bytes every 2.5 s per connection: for 5000
// nodes, 2000 frames a second over all replicas.
const SessionIdleTimeout = 10 * time.Second

// firstRedial is the most a session waits before its first redial: a
// random share of it, so a replica's thousands of clients do not land on
// the survivors in the same millisecond, and short, since it is most of a
// failover's resume time. Later redials follow sessionBackoff: from
// 100-200 ms, doubling, capped so that an outage costs a dial every 10 s
// per client.
const firstRedial = 100 * time.Millisecond

var sessionBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 1, Steps: 8, Cap: 10 * time.Second}

// reopenTimeout bounds one reopen on a live connection; one that takes
// longer is tried again.
const reopenTimeout = 30 * time.Second

// Resume says how one channel was carried over a lost connection.
type Resume struct {
	Channel *SessionChannel
	// Outcome is ResumeReopened, ResumeRefused, ResumeLostInitial or
	// ResumeTimedOut.
	Outcome string
	// Lost is when the channel's connection was found gone (its last
	// event read, then the close or the 503); Reopened when the new
	// connection acknowledged the reopen (or refused it).
	Lost, Reopened time.Time
	// ResourceVersion is where the channel was reopened from.
	ResourceVersion string
}

// The outcomes of a resume; also the values of the outcome label of
// nodeproxy_watchmux_client_resumes_total.
const (
	ResumeReopened    = "reopened"
	ResumeExpired     = "expired"
	ResumeRefused     = "refused"
	ResumeLostInitial = "lost_initial"
	ResumeTimedOut    = "timed_out"
)

// SessionOption adjusts NewSession.
type SessionOption func(*sessionOptions)

type sessionOptions struct {
	dial          []DialOption
	onResume      func(Resume)
	onConnection  func(connected bool)
	idle          time.Duration
	resumeTimeout time.Duration
	// onUnauthorized: see WithEndOnUnauthorized; nil keeps dialing.
	onUnauthorized func(error)
}

// WithDialOptions passes opts to every Dial of the session (WithMaxOpening
// bounds the reopens in flight on a new connection as it bounds opens).
// The idle timeout is the session's own (WithKeepalive).
func WithDialOptions(opts ...DialOption) SessionOption {
	return func(o *sessionOptions) { o.dial = append(o.dial, opts...) }
}

// WithKeepalive sets how long the session waits to hear from its server
// (SessionIdleTimeout by default); it pings every quarter of it.
func WithKeepalive(idle time.Duration) SessionOption {
	return func(o *sessionOptions) { o.idle = idle }
}

// WithResumeObserver calls f once per channel carried over a lost
// connection, from the channel's goroutine; f must not block.
func WithResumeObserver(f func(Resume)) SessionOption {
	return func(o *sessionOptions) { o.onResume = f }
}

// WithConnectionObserver calls f with true each time the session has a
// connection up, the first included, and with false each time it has
// lost one, in that order, from the session's goroutine; f must not
// block.
func WithConnectionObserver(f func(connected bool)) SessionOption {
	return func(o *sessionOptions) { o.onConnection = f }
}

// WithResumeTimeout bounds how long a channel waits to be carried over a
// lost connection, from the moment the loss was found: past it, the
// channel's Events close without an ERROR (outcome ResumeTimedOut), and
// the consumer resumes it where else it can, from the last
// resourceVersion it saw. Without it (0) a channel waits as long as the
// session lives, which suits a consumer with nowhere else to go.
func WithResumeTimeout(d time.Duration) SessionOption {
	return func(o *sessionOptions) { o.resumeTimeout = d }
}

// WithEndOnUnauthorized ends the session, rather than dialing again, once
// its server no longer accepts its credential: the server closed the
// connection because the credential no longer authenticates (close code
// 1008, after ERROR 401 on every channel: the hub's re-authentication), or
// refused a redial with 401. f is called once, from the session's
// goroutine, with why, before the session's channels end (those the
// server ended have had their ERROR 401; one still waiting to resume ends
// without one). For a credential that cannot change under the session (a
// client's bearer token, which a redial would only present again); a
// session whose credential is renewed at each dial (the node's rotated
// certificate, re-read from its file) is better left dialing.
func WithEndOnUnauthorized(f func(err error)) SessionOption {
	return func(o *sessionOptions) { o.onUnauthorized = f }
}

// unauthorized reports whether err, why a connection ended or a dial
// failed, says that the server no longer accepts the credential.
func unauthorized(err error) bool {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		return ce.Code == websocket.ClosePolicyViolation
	}
	return apierrors.IsUnauthorized(err)
}

// NewSession dials cfg's server (one attempt, of at most 30 s: an
// unreachable server is the caller's error to see) and keeps a connection
// up until ctx ends or Close.
func NewSession(ctx context.Context, cfg *rest.Config, opts ...SessionOption) (*Session, error) {
	o := sessionOptions{idle: SessionIdleTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if o.idle <= 0 {
		return nil, fmt.Errorf("the session's idle timeout must be positive, got %s", o.idle)
	}
	if o.resumeTimeout < 0 {
		return nil, fmt.Errorf("the session's resume timeout must not be negative, got %s", o.resumeTimeout)
	}
	dialOpts := append(o.dial[:len(o.dial):len(o.dial)], WithIdleTimeout(o.idle))
	cfg = rest.CopyConfig(cfg)
	return newSession(ctx, func(ctx context.Context) (*Client, error) { return Dial(ctx, cfg, dialOpts...) }, o)
}

func newSession(ctx context.Context, dial func(context.Context) (*Client, error), o sessionOptions) (*Session, error) {
	dialCtx, cancel := context.WithTimeout(ctx, reopenTimeout) // as each redial
	c, err := dial(dialCtx)
	cancel()
	if err != nil {
		return nil, err
	}
	// conn is set before run starts, so that the session is Connected as
	// soon as NewSession returns: its first dial has succeeded.
	s := &Session{dial: dial, o: o, conn: c, done: make(chan struct{}), changed: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	context.AfterFunc(ctx, s.cancel)
	go s.run(c)
	return s, nil
}

// Close closes the connection and every channel; their Events close.
func (s *Session) Close() error {
	s.cancel()
	<-s.done
	s.pumps.Wait()
	return nil
}

// Connected reports whether the session has a connection up.
func (s *Session) Connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn != nil
}

// Server is the address (scheme and host) of the session's connection,
// after any redirect (a sharded hub's owner of the caller's node); ""
// while redialing. Each redial starts again from the session's config.
func (s *Session) Server() string {
	if c := s.current(); c != nil {
		return c.Server()
	}
	return ""
}

// run holds a connection up: c first, then one dial after another.
func (s *Session) run(c *Client) {
	defer close(s.done)
	for {
		s.setConn(c)
		s.observeConnection(true)
		pinged := make(chan struct{})
		go s.keepalive(c, pinged)
		select {
		case <-c.Done():
			klog.V(2).InfoS("Bulk watch connection ended; dialing again", "reason", c.Err())
		case <-s.ctx.Done():
			_ = c.Close()
		}
		<-pinged
		s.setConn(nil)
		s.observeConnection(false)
		var refused error
		if s.o.onUnauthorized != nil && unauthorized(c.Err()) {
			refused = c.Err()
		} else {
			c, refused = s.redial()
		}
		if refused != nil {
			klog.V(2).InfoS("Bulk watch credential no longer accepted; ending the session", "reason", refused)
			s.o.onUnauthorized(refused)
			s.cancel()
			return
		}
		if c == nil {
			return
		}
	}
}

// redial dials until it connects, or the session ends (nil), or, with
// WithEndOnUnauthorized, the server refuses the credential (nil and why).
func (s *Session) redial() (*Client, error) {
	backoff := sessionBackoff
	delay := rand.N(firstRedial)
	for {
		select {
		case <-time.After(delay):
		case <-s.ctx.Done():
			return nil, nil
		}
		ctx, cancel := context.WithTimeout(s.ctx, reopenTimeout)
		c, err := s.dial(ctx)
		cancel()
		if err == nil {
			clientReconnectsTotal.WithLabelValues("ok").Inc()
			return c, nil
		}
		clientReconnectsTotal.WithLabelValues("error").Inc()
		if s.o.onUnauthorized != nil && unauthorized(err) {
			return nil, err
		}
		delay = backoff.Step()
		klog.V(2).InfoS("Bulk watch dial failed; trying again", "err", err, "retryIn", delay.Round(time.Millisecond))
	}
}

// keepalive pings c until it ends: the pongs keep its idle timeout from
// firing on a quiet but live connection.
func (s *Session) keepalive(c *Client, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(s.o.idle / 4)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			_ = c.ping() // a failed ping ends the connection by itself
		case <-c.Done():
			return
		}
	}
}

func (s *Session) observeConnection(connected bool) {
	if s.o.onConnection != nil {
		s.o.onConnection(connected)
	}
}

func (s *Session) setConn(c *Client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conn = c
	close(s.changed)
	s.changed = make(chan struct{})
}

// current is the session's connection; nil while redialing.
func (s *Session) current() *Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn
}

// connOtherThan waits for a live connection other than old (nil: any),
// until ctx or the session ends, or stop closes.
func (s *Session) connOtherThan(ctx context.Context, old *Client, stop <-chan struct{}) (*Client, error) {
	for {
		s.mu.Lock()
		c, changed := s.conn, s.changed
		s.mu.Unlock()
		if c != nil && c != old {
			return c, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.ctx.Done():
			return nil, fmt.Errorf("session closed: %w", s.ctx.Err())
		case <-stop:
			return nil, errChannelClosed
		}
	}
}

// retire closes c if it is still the session's connection: its server
// said it is going away (ERROR 503), and the close frame that follows may
// be slow to come.
func (s *Session) retire(c *Client) {
	s.mu.Lock()
	current := s.conn == c
	s.mu.Unlock()
	if current {
		go func() { _ = c.Close() }()
	}
}
