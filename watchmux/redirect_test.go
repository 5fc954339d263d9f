package watchmux

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/watch"
)

// redirector answers every upgrade with 307 to location (a format with
// the request's URI, %s).
func redirector(t *testing.T, location string) *httptest.Server {
	t.Helper()
	hs := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", fmt.Sprintf(location, r.URL.RequestURI()))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTemporaryRedirect)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":307,"reason":"NotOwner","message":"served elsewhere"}`)
	}))
	t.Cleanup(hs.Close)
	return hs
}

// TestDialFollowsARedirectToTheOwner: an upgrade answered 307 is made
// again at the Location, by its name (reached through the config's Dial,
// verified against the same CA with the Location's host as the server
// name), with the same path and query; the connection then works and
// says where it went.
func TestDialFollowsARedirectToTheOwner(t *testing.T) {
	_, owner, _ := startServer(t, DefaultOptions())
	// httptest's certificate names example.com: the owner's stable name
	// here, which only the config's Dial resolves.
	_, port, _ := net.SplitHostPort(owner.Listener.Addr().String())
	entry := redirector(t, "https://example.com:"+port+"%s")
	cfg := restConfigFor(entry)
	var dialed []string
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialed = append(dialed, addr)
		if strings.HasPrefix(addr, "example.com:") {
			addr = owner.Listener.Addr().String()
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	c, err := Dial(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, want := c.Server(), "https://example.com:"+port; got != want {
		t.Fatalf("connection to %s, want %s", got, want)
	}
	if len(dialed) != 2 || dialed[1] != "example.com:"+port {
		t.Fatalf("dialed %v, want the entry and then example.com:%s", dialed, port)
	}
	ch, err := c.Watch(context.Background(), sel("count-3"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if ev, ok := next(t, ch); !ok || ev.Type != watch.Added || string(ev.Object) != fmt.Sprintf(`{"n":%d}`, i) {
			t.Fatalf("event %d: %v %s (open %v)", i, ev.Type, ev.Object, ok)
		}
	}
}

// TestDialFollowsAFewRedirectsAndNoMore: replicas that keep redirecting
// (their tables disagreeing) fail the dial after maxRedirects, and a
// redirect away from https is never followed: the credentials would go
// in the clear.
func TestDialFollowsAFewRedirectsAndNoMore(t *testing.T) {
	var loop *httptest.Server
	loop = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", loop.URL+r.URL.RequestURI())
		w.WriteHeader(http.StatusTemporaryRedirect)
	}))
	defer loop.Close()
	_, err := Dial(context.Background(), restConfigFor(loop))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("redirected %d times", maxRedirects+1)) {
		t.Fatalf("dial of a redirect loop: %v, want it to fail after %d redirects", err, maxRedirects+1)
	}

	plain := redirector(t, "http://example.com%s")
	if _, err := Dial(context.Background(), restConfigFor(plain)); err == nil || !strings.Contains(err.Error(), "not https") {
		t.Fatalf("dial redirected to http: %v, want it refused", err)
	}
}
