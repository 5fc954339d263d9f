package watchmux

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/gorilla/websocket"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// maxRedirects is how many redirects one dial follows. A sharded hub
// sends a node to its owner in one; a second covers a replica that
// redirected by a table the owner no longer has (replicas learn of a
// change a moment apart); past three the replicas disagree for longer
// than a dial should wait, and the caller's next dial, through the
// Service again, asks afresh.
const maxRedirects = 3

// upgrade opens the bulk watch websocket at u with cfg's credentials,
// following a sharded hub's redirects (307 with a Location: the replica
// that owns the caller's node) with the same credentials and CA, the
// TLS server name the Location's host. It returns the connection and
// the address (scheme and host) it is to.
func upgrade(ctx context.Context, cfg *rest.Config, u string) (*websocket.Conn, string, error) {
	for hop := 0; ; hop++ {
		target, err := url.Parse(u)
		if err != nil {
			return nil, "", fmt.Errorf("bulk watch address %q: %w", u, err)
		}
		server := target.Scheme + "://" + target.Host
		ws, err := upgradeOnce(ctx, cfg, u)
		var moved *redirected
		if !errors.As(err, &moved) {
			if err != nil {
				return nil, "", fmt.Errorf("bulk watch upgrade at %s: %w", u, err)
			}
			return ws, server, nil
		}
		next, err := target.Parse(moved.location)
		switch {
		case err != nil:
			clientRedirectsTotal.WithLabelValues("refused").Inc()
			return nil, "", fmt.Errorf("bulk watch upgrade at %s redirected to %q: %w", u, moved.location, err)
		case next.Scheme != "https":
			// The credentials go where the Location says: never in
			// the clear.
			clientRedirectsTotal.WithLabelValues("refused").Inc()
			return nil, "", fmt.Errorf("bulk watch upgrade at %s redirected to %s, not https: not followed", u, next)
		case hop == maxRedirects:
			clientRedirectsTotal.WithLabelValues("refused").Inc()
			return nil, "", fmt.Errorf("bulk watch upgrade at %s: redirected %d times, last to %s: %w", u, hop+1, next, moved)
		}
		clientRedirectsTotal.WithLabelValues("followed").Inc()
		klog.V(2).InfoS("Bulk watch upgrade redirected; following", "from", server, "to", next.Scheme+"://"+next.Host)
		cfg = redirectedConfig(cfg, next)
		u = next.String()
	}
}

// upgradeOnce is one upgrade at u, not following a redirect.
func upgradeOnce(ctx context.Context, cfg *rest.Config, u string) (*websocket.Conn, error) {
	// Protobuf first: a server that knows it picks it; an older one
	// picks the JSON one, and every event comes as JSON.
	ws, rt, err := newUpgrader(cfg, v1alpha1.WatchSubprotocolProtobuf, v1alpha1.WatchSubprotocol)
	if err != nil {
		return nil, fmt.Errorf("transport for %s: %w", cfg.Host, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	_ = resp.Body.Close()
	return ws.conn, nil
}

// redirectedConfig is cfg for the server at to, which a redirect named:
// the same credentials and CA, the server name to's host (a
// configured ServerName named the server redirected from).
func redirectedConfig(cfg *rest.Config, to *url.URL) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Host = to.Scheme + "://" + to.Host
	c.TLSClientConfig.ServerName = to.Hostname()
	return c
}
