package endpoint

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// fakeConn is a client's hub connection in the table's unit tests.
type fakeConn struct {
	token  string
	mu     sync.Mutex
	closed bool
}

func (f *fakeConn) Connected() bool { f.mu.Lock(); defer f.mu.Unlock(); return !f.closed }
func (f *fakeConn) close()          { f.mu.Lock(); defer f.mu.Unlock(); f.closed = true }

// table is a client table whose hub accepts the tokens starting with
// "good" and JWTs ("ey", a JSON header's start), cannot be reached with those starting with "down", and refuses
// the others (401), on a clock the test moves, with no dial rate unless
// the test sets one.
type table struct {
	*clientHubs
	clock time.Time
	mu    sync.Mutex
	dials map[string]int
	up    map[string]int
	// refuse has the hub refuse a token's connection, by the token: as
	// when its re-authentication fails.
	refuse map[string]func(error)
}

func newTable(t *testing.T) *table {
	tb := &table{clock: time.Unix(1_000_000, 0), dials: map[string]int{}, up: map[string]int{}, refuse: map[string]func(error){}}
	c := newClientHubs(&rest.Config{Host: "https://hub.invalid"}, func(id string) {
		tb.mu.Lock()
		tb.up[id]++
		tb.mu.Unlock()
	})
	c.limiter, c.vouchedLimiter = flowcontrol.NewFakeAlwaysRateLimiter(), flowcontrol.NewFakeAlwaysRateLimiter()
	c.now = func() time.Time { tb.mu.Lock(); defer tb.mu.Unlock(); return tb.clock }
	c.dialer = func(_ context.Context, _ *rest.Config, token string, up func(), refused func(error)) (clientConn, error) {
		tb.mu.Lock()
		tb.dials[token]++
		tb.mu.Unlock()
		switch {
		case strings.HasPrefix(token, "down"):
			return nil, errors.New("dial tcp: connection refused")
		case !strings.HasPrefix(token, "good") && !strings.HasPrefix(token, "ey"):
			return nil, apierrors.NewUnauthorized("invalid bearer token")
		}
		up()
		conn := &fakeConn{token: token}
		tb.mu.Lock()
		tb.refuse[token] = func(err error) { conn.close(); refused(err) }
		tb.mu.Unlock()
		return conn, nil
	}
	c.ctx = context.Background()
	tb.clientHubs = c
	return tb
}

func keyFor(token string) clientKey {
	sum := sha256.Sum256([]byte(token))
	return clientKey{token: token, id: hex.EncodeToString(sum[:])}
}

func (tb *table) advance(d time.Duration) { tb.mu.Lock(); tb.clock = tb.clock.Add(d); tb.mu.Unlock() }

func (tb *table) dialsOf(token string) int {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.dials[token]
}

// read is one hub-served read with token: whether it got a connection,
// and its release (nil if not).
func (tb *table) read(token string) (clientConn, func()) {
	conn, _, release := tb.acquire(context.Background(), keyFor(token))
	return conn, release
}

// vouchAndSweep has kube-apiserver vouch for token, then sweeps and
// waits for the sweep's dials.
func (tb *table) vouchAndSweep(t *testing.T, token string) {
	t.Helper()
	tb.vouch(keyFor(token))
	tb.sweep()
	tb.settle(t)
}

// settle waits for the sweep's background dials.
func (tb *table) settle(t *testing.T) {
	t.Helper()
	for range 1000 {
		tb.clientHubs.mu.Lock()
		n := len(tb.clientHubs.dialing)
		tb.clientHubs.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("the sweep's dials did not end")
}

func TestClientTableFailedDialsTakeNoPlace(t *testing.T) {
	tb := newTable(t)
	for i := range 10 * maxClientHubs {
		if conn, _ := tb.read(fmt.Sprint("bad-", i)); conn != nil {
			t.Fatalf("bad token %d got a connection", i)
		}
	}
	if conn, release := tb.read("good-proxy"); conn == nil {
		t.Fatal("a valid token after 160 bad ones: no connection")
	} else {
		release()
	}
	if got := len(tb.failed); got != 10*maxClientHubs {
		t.Errorf("failed tokens remembered: %d, want %d", got, 10*maxClientHubs)
	}
}

// A connection knows from its token, read once when it is recorded,
// whether its new reads are put to kube-apiserver first: all but those of
// a bound ServiceAccount token, which the hub checks itself.
func TestClientTableAsksAboutEveryTokenButABoundOne(t *testing.T) {
	enc := base64.RawURLEncoding.EncodeToString
	jwt := func(claims string) string {
		return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(claims)) + ".c2ln"
	}
	tb := newTable(t)
	for _, tc := range []struct {
		name, token string
		asked       bool
	}{
		{"a token bound to a pod", jwt(`{"kubernetes.io":{"serviceaccount":{"name":"kube-proxy","uid":"sa"},"pod":{"name":"p","uid":"p"}}}`), false},
		{"a TokenRequest bound to nothing", jwt(`{"kubernetes.io":{"serviceaccount":{"name":"kube-proxy","uid":"sa"}}}`), true},
		{"an opaque token", "good-static", true},
	} {
		for range 2 { // dialed, then from the table
			conn, asked, release := tb.acquire(context.Background(), keyFor(tc.token))
			if conn == nil {
				t.Fatalf("%s: no connection", tc.name)
			}
			release()
			if asked != tc.asked {
				t.Errorf("%s: asked %v, want %v", tc.name, asked, tc.asked)
			}
		}
	}
}

func TestClientTableFailedTokenIsDialedOnlyAtItsBackoff(t *testing.T) {
	tb := newTable(t)
	for range 100 {
		tb.read("down")
	}
	if got := tb.dialsOf("down"); got != 1 {
		t.Fatalf("a token read 100 times, the hub unreachable: %d dials, want 1", got)
	}
	tb.advance(clientRetry(1))
	tb.read("down")
	tb.read("down")
	if got := tb.dialsOf("down"); got != 2 {
		t.Fatalf("after its first backoff: %d dials, want 2", got)
	}
	tb.advance(clientRetry(2) - time.Second)
	tb.read("down")
	if got := tb.dialsOf("down"); got != 2 {
		t.Fatalf("before its second backoff (%s): %d dials, want 2", clientRetry(2), got)
	}
}

// TestClientTableRefusedTokenIsDialedOnlyOnceVouchedFor: a token the hub
// refused (401) is not dialed again by its reads, however long after,
// nor when the node's own connection comes back; kube-apiserver serving
// it a watch again has the sweep dial it.
func TestClientTableRefusedTokenIsDialedOnlyOnceVouchedFor(t *testing.T) {
	tb := newTable(t)
	tb.vouch(keyFor("bad")) // before the refusal: says nothing after it
	tb.read("bad")
	for range 10 {
		tb.advance(clientIdleTimeout - time.Second)
		tb.read("bad")
		tb.forgetFailures()
		tb.sweep()
		tb.settle(t)
	}
	if got := tb.dialsOf("bad"); got != 1 {
		t.Fatalf("a refused token read for 50 minutes: %d dials, want 1", got)
	}
	tb.vouchAndSweep(t, "bad")
	if got := tb.dialsOf("bad"); got != 2 {
		t.Fatalf("vouched for after its refusal: %d dials, want 2", got)
	}
}

// TestClientTableRefusedTokenThatKubeAPIServerAnswersIsDialedAtItsBackoff:
// a client that only lists comes back to the hub too: kube-apiserver
// answering one of its reads has the next read after the token's backoff
// dial it.
func TestClientTableRefusedTokenThatKubeAPIServerAnswersIsDialedAtItsBackoff(t *testing.T) {
	tb := newTable(t)
	tb.read("bad")
	if !tb.refused(keyFor("bad").id) {
		t.Fatal("a token the hub refused is not remembered as refused")
	}
	tb.accepted(keyFor("bad"))
	tb.read("bad")
	if got := tb.dialsOf("bad"); got != 1 {
		t.Fatalf("accepted by kube-apiserver, read within its backoff: %d dials, want 1", got)
	}
	tb.advance(clientRetry(1))
	tb.read("bad")
	if got := tb.dialsOf("bad"); got != 2 {
		t.Fatalf("accepted by kube-apiserver, read after its backoff: %d dials, want 2", got)
	}
}

// TestClientTableConnectionTheHubRefusesLeavesAtOnce: the hub closes a
// token's connection (its re-authentication failed): the connection
// leaves the table at once, though a watch still holds it, and the token
// is then treated as refused at a dial.
func TestClientTableConnectionTheHubRefusesLeavesAtOnce(t *testing.T) {
	tb := newTable(t)
	conn, release := tb.read("good-revoked")
	if conn == nil {
		t.Fatal("no connection")
	}
	tb.refuse["good-revoked"](apierrors.NewUnauthorized("Unauthorized"))
	if got := len(tb.conns); got != 0 {
		t.Fatalf("%d connections in the table after the hub refused the only one", got)
	}
	release() // the watch ends after the refusal
	tb.advance(clientIdleTimeout)
	tb.forgetFailures()
	if conn, _ := tb.read("good-revoked"); conn != nil {
		t.Fatal("the refused token got a connection at a read")
	}
	if got := tb.dialsOf("good-revoked"); got != 1 {
		t.Fatalf("the refused token dialed %d times, want 1", got)
	}
	tb.vouchAndSweep(t, "good-revoked")
	if conn, release := tb.read("good-revoked"); conn == nil {
		t.Fatal("vouched for after its refusal: no connection")
	} else {
		release()
	}
}

// TestClientTableTokenKubeAPIServerRefusesLeavesAtOnce: kube-apiserver
// refused a token at a new read (tokenCheck): its connection is closed
// and leaves the table at once, even with a watch open on it, and the
// token is a refused one: no dial at a read, until kube-apiserver
// vouches for it again.
func TestClientTableTokenKubeAPIServerRefusesLeavesAtOnce(t *testing.T) {
	tb := newTable(t)
	conn, release := tb.read("good-refused")
	if conn == nil {
		t.Fatal("no connection")
	}
	defer release() // a watch still open on it
	tb.refuseToken(keyFor("good-refused").id, apierrors.NewUnauthorized("Unauthorized"))
	if got := len(tb.conns); got != 0 {
		t.Fatalf("%d connections in the table after kube-apiserver refused the only one's token", got)
	}
	if conn.Connected() {
		t.Error("the refused token's connection is still open")
	}
	if !tb.refused(keyFor("good-refused").id) {
		t.Error("the token is not remembered as refused")
	}
	tb.advance(clientIdleTimeout)
	if conn, _ := tb.read("good-refused"); conn != nil {
		t.Fatal("the refused token got a connection at a read")
	}
	if got := tb.dialsOf("good-refused"); got != 1 {
		t.Fatalf("the refused token dialed %d times, want 1", got)
	}
	tb.vouchAndSweep(t, "good-refused")
	if conn, release := tb.read("good-refused"); conn == nil {
		t.Fatal("vouched for after its refusal: no connection")
	} else {
		release()
	}
}

func TestClientTableRemembersABoundedNumberOfFailures(t *testing.T) {
	tb := newTable(t)
	for i := range maxFailedTokens + 50 {
		tb.advance(time.Millisecond)
		tb.read(fmt.Sprint("bad-", i))
	}
	if got := len(tb.failed); got != maxFailedTokens {
		t.Errorf("failed tokens remembered: %d, want %d", got, maxFailedTokens)
	}
	// The oldest went first: the first token is dialed again at once.
	tb.read("bad-0")
	if got := tb.dialsOf("bad-0"); got != 2 {
		t.Errorf("the oldest failure, forgotten, read again: %d dials, want 2", got)
	}
}

func TestClientTableConnectionsInUseAreNeverClosedForANewClient(t *testing.T) {
	tb := newTable(t)
	var conns []clientConn
	for i := range maxClientHubs {
		conn, _ := tb.read(fmt.Sprint("good-", i)) // never released: a watch open
		if conn == nil {
			t.Fatalf("client %d: no connection", i)
		}
		conns = append(conns, conn)
	}
	if conn, _ := tb.read("good-new"); conn != nil {
		t.Fatal("a 17th client got a connection while 16 are in use")
	}
	for i, conn := range conns {
		if !conn.Connected() {
			t.Errorf("client %d's connection, in use, was closed", i)
		}
	}
}

func TestClientTableAtTheLimitTheConnectionUnusedLongestMakesRoom(t *testing.T) {
	tb := newTable(t)
	var conns []clientConn
	for i := range maxClientHubs {
		tb.advance(time.Second)
		conn, release := tb.read(fmt.Sprint("good-", i))
		if conn == nil {
			t.Fatalf("client %d: no connection", i)
		}
		if i < 2 {
			release() // 0 and 1 idle, 0 the longest
		}
		conns = append(conns, conn)
	}
	conn, release := tb.read("good-new")
	if conn == nil {
		t.Fatal("a new client at the limit, with two connections idle: none")
	}
	release()
	if conns[0].Connected() {
		t.Error("the connection idle longest is still open")
	}
	for i := 1; i < maxClientHubs; i++ {
		if !conns[i].Connected() {
			t.Errorf("client %d's connection was closed", i)
		}
	}
	if got := len(tb.conns); got != maxClientHubs {
		t.Errorf("%d connections, want %d", got, maxClientHubs)
	}
}

// TestClientTableVouchedTokenReachesTheHubThroughAFlood: new tokens come
// faster than the dial rate, so a valid new token is throttled and its
// watch goes to kube-apiserver; kube-apiserver accepting that watch
// vouches for it, and the sweep dials it from a budget the flood cannot
// spend.
func TestClientTableVouchedTokenReachesTheHubThroughAFlood(t *testing.T) {
	tb := newTable(t)
	tb.limiter = flowcontrol.NewFakeNeverRateLimiter() // spent by the flood
	if conn, _ := tb.read("good-proxy"); conn != nil {
		t.Fatal("a connection past the dial rate")
	}
	tb.vouchAndSweep(t, "good-proxy")
	if conn, release := tb.read("good-proxy"); conn == nil {
		t.Fatal("the vouched token has no connection after the sweep")
	} else {
		release()
	}
	if got := tb.up[keyFor("good-proxy").id]; got != 1 {
		t.Errorf("its proxied watches returned %d times, want 1", got)
	}
	// A vouched token the hub refuses is dialed again at its backoff
	// only.
	tb.vouch(keyFor("bad-but-vouched"))
	for range 3 {
		tb.sweep()
		tb.settle(t)
	}
	if got := tb.dialsOf("bad-but-vouched"); got != 1 {
		t.Errorf("a vouched token the hub refuses, three sweeps in its backoff: %d dials, want 1", got)
	}
}

func TestClientTableSweepClosesIdleConnectionsAndForgetsUnusedFailures(t *testing.T) {
	tb := newTable(t)
	idle, release := tb.read("good-idle")
	release()
	busy, _ := tb.read("good-busy")
	tb.read("bad")
	tb.advance(clientIdleTimeout)
	tb.sweep()
	if idle.Connected() {
		t.Error("a connection idle for clientIdleTimeout is open")
	}
	if !busy.Connected() {
		t.Error("a connection with a request open was closed")
	}
	if len(tb.failed) != 0 {
		t.Errorf("%d failures remembered, want 0", len(tb.failed))
	}
}
