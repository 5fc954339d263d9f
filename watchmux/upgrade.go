package watchmux

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"

	"github.com/gorilla/websocket"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
)

// upgrader is the last round tripper of a bulk watch upgrade, under
// client-go's wrappers for the config's credentials (bearer tokens and
// their files, exec plugins, impersonation, the user agent): it dials the
// websocket itself, rather than through client-go's websocket transport,
// for two things that transport cannot give: the Location of a refusal
// that redirects (a sharded hub's 307 names the replica that owns the
// node; client-go hands back only the body), and the config's Dial
// (rest.Config.Dial), which client-go's transport ignores and with which
// a caller reaches servers by names its DNS does not have (tests).
type upgrader struct {
	tls          *tls.Config
	proxy        func(*http.Request) (*url.URL, error)
	dial         func(ctx context.Context, network, address string) (net.Conn, error)
	subprotocols []string
	conn         *websocket.Conn // after a successful round trip
}

// upgradeBuffer is each direction's websocket buffer: what client-go's
// websocket transport gave the connection before, so that its reads and
// writes of large events cost what they did.
const upgradeBuffer = 33 * 1024

// redirected is a refused upgrade that names where to go: a 307 or 308
// with a Location.
type redirected struct {
	location string
	status   *metav1.Status // the body's, if it was one
}

func (r *redirected) Error() string {
	if r.status != nil {
		return fmt.Sprintf("redirected to %s: %s", r.location, r.status.Message)
	}
	return "redirected to " + r.location
}

func newUpgrader(cfg *rest.Config, subprotocols ...string) (*upgrader, http.RoundTripper, error) {
	tcfg, err := cfg.TransportConfig()
	if err != nil {
		return nil, nil, err
	}
	tlsConfig, err := transport.TLSConfigFor(tcfg)
	if err != nil {
		return nil, nil, err
	}
	proxy := cfg.Proxy
	if proxy == nil {
		proxy = utilnet.NewProxierWithNoProxyCIDR(http.ProxyFromEnvironment)
	}
	u := &upgrader{tls: tlsConfig, proxy: proxy, dial: cfg.Dial, subprotocols: subprotocols}
	rt, err := transport.HTTPWrappersForConfig(tcfg, u)
	if err != nil {
		return nil, nil, err
	}
	return u, rt, nil
}

// RoundTrip upgrades req. A refusal is the server's Status as an
// *apierrors.StatusError when it sent one, or *redirected.
func (u *upgrader) RoundTrip(req *http.Request) (*http.Response, error) {
	target := *req.URL
	switch target.Scheme {
	case "https":
		target.Scheme = "wss"
	case "http":
		target.Scheme = "ws"
	default:
		return nil, fmt.Errorf("unknown URL scheme %q", target.Scheme)
	}
	d := websocket.Dialer{
		Proxy: u.proxy, TLSClientConfig: u.tls, NetDialContext: u.dial, Subprotocols: u.subprotocols,
		ReadBufferSize: upgradeBuffer, WriteBufferSize: upgradeBuffer,
	}
	ws, resp, err := d.DialContext(req.Context(), target.String(), req.Header)
	if err == nil {
		if !slices.Contains(u.subprotocols, ws.Subprotocol()) {
			// A server that picked none of them would be read in a
			// protocol it does not speak.
			_ = ws.Close()
			return nil, fmt.Errorf("the server chose subprotocol %q, not one of %q", ws.Subprotocol(), u.subprotocols)
		}
		u.conn = ws
		return resp, nil
	}
	if resp == nil || !errors.Is(err, websocket.ErrBadHandshake) {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64*1024))
	var st *metav1.Status
	var decoded metav1.Status
	if json.Unmarshal(body, &decoded) == nil && decoded.Kind == "Status" {
		st = &decoded
	}
	switch loc := resp.Header.Get("Location"); {
	case (resp.StatusCode == http.StatusTemporaryRedirect || resp.StatusCode == http.StatusPermanentRedirect) && loc != "":
		return nil, &redirected{location: loc, status: st}
	case st != nil:
		return nil, &apierrors.StatusError{ErrStatus: *st}
	}
	return nil, fmt.Errorf("%w (%s): %s", err, resp.Status, body)
}
