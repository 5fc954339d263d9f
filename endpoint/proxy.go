package endpoint

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// upstream is kube-apiserver, reached as one kind of caller. For the
// kubelet, a reverse proxy whose transport presents the kubelet's own
// client certificate, re-read from its file when the kubelet rotates it
// (client-go's transport does so and closes the connections made with the
// old one). For the node's other clients, one that presents no
// certificate and passes on the caller's own Authorization header.
type upstream struct {
	url   *url.URL
	proxy *httputil.ReverseProxy
	who   caller

	mu sync.Mutex
	// cuttable are the proxied watches the hub could serve, ended when it
	// comes back so that the caller watches again through it; each with
	// the key of the caller's hub connection (clientKey; "" for the
	// kubelet's, the node's own).
	cuttable map[*cutBody]string // guarded by mu
	// accepted, if set, is told the key of each cuttable watch
	// kube-apiserver accepted (200): the token authenticated, and may
	// watch what the hub could serve it.
	accepted func(key clientKey)
	// returns counts returnToHub's calls: a watch that was on its way to
	// kube-apiserver while the hub came back (registered in cuttable only
	// once kube-apiserver answered, after returnToHub looked) sees it
	// change and ends itself.
	returns atomic.Uint64
}

// newUpstream proxies who's requests to kube-apiserver at cfg: the node's
// credentials for the kubelet; for a client, cfg must carry none.
func newUpstream(cfg *rest.Config, who caller) (*upstream, error) {
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "https" {
		return nil, errors.New("kube-apiserver must be reached over https, got " + cfg.Host)
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	if who == client && (cfg.CertFile != "" || len(cfg.CertData) > 0 || cfg.BearerToken != "" || cfg.BearerTokenFile != "" ||
		cfg.Username != "" || cfg.ExecProvider != nil || cfg.AuthProvider != nil) {
		return nil, errors.New("the clients' way to kube-apiserver must carry no credential of its own")
	}
	up := &upstream{url: u, who: who, cuttable: map[*cutBody]string{}}
	up.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			if who == kubelet {
				// The identity upstream is the certificate's, nothing the
				// caller sends: a token would otherwise be a second identity.
				pr.Out.Header.Del("Authorization")
			}
		},
		Transport:     rt,
		FlushInterval: -1, // watches: every event as it comes
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return // the kubelet went away
			}
			klog.ErrorS(err, "kube-apiserver unreachable", "path", req.URL.Path)
			writeError(w, req, apierrors.NewServiceUnavailable("kube-apiserver is unreachable from the node endpoint: "+err.Error()))
		},
	}
	return up, nil
}

// serve proxies req unchanged. A watch the hub could serve (cuttable) is
// registered under key, the caller's hub connection, so that returnToHub
// can end it, and, once kube-apiserver accepts it, told to accepted.
// observe, if not nil, is handed kube-apiserver's answer before the
// caller gets it (it may replace the body with one that reads the same).
func (up *upstream) serve(w http.ResponseWriter, req *http.Request, resource, verb string, cuttable bool, key clientKey, observe func(*http.Response)) {
	m := up.who.metrics()
	m.requests.WithLabelValues(pathAPIServer, resource, verb).Inc()
	p := up.proxy
	if observe != nil {
		observed := *up.proxy
		observed.ModifyResponse = func(resp *http.Response) error {
			observe(resp)
			return nil
		}
		p = &observed
	}
	if verb != "watch" {
		p.ServeHTTP(w, req)
		return
	}
	m.watches.WithLabelValues(pathAPIServer, resource).Inc()
	defer m.watches.WithLabelValues(pathAPIServer, resource).Dec()
	if !cuttable {
		p.ServeHTTP(w, req)
		return
	}
	p = &httputil.ReverseProxy{}
	*p = *up.proxy
	var body *cutBody
	returns := up.returns.Load()
	p.ModifyResponse = func(resp *http.Response) error {
		if observe != nil {
			observe(resp)
		}
		body = &cutBody{ReadCloser: resp.Body}
		resp.Body = body
		up.mu.Lock()
		up.cuttable[body] = key.id
		up.mu.Unlock()
		if resp.StatusCode == http.StatusOK && key.id != "" && up.accepted != nil {
			up.accepted(key)
		}
		if up.returns.Load() != returns && body.cut() {
			returnsToHub.Inc()
		}
		return nil
	}
	defer func() {
		if body != nil {
			up.mu.Lock()
			delete(up.cuttable, body)
			up.mu.Unlock()
		}
	}()
	p.ServeHTTP(w, req)
}

// serveObserved proxies req, which is not a watch, unchanged, and hands
// observe kube-apiserver's answer before the caller gets it (observe may
// read its body if it leaves resp.Body to read as it was), or, when
// none came, the error.
func (up *upstream) serveObserved(w http.ResponseWriter, req *http.Request, resource, verb string, observe func(*http.Response, error)) {
	up.who.metrics().requests.WithLabelValues(pathAPIServer, resource, verb).Inc()
	p := *up.proxy
	p.ModifyResponse = func(resp *http.Response) error {
		observe(resp, nil)
		return nil
	}
	p.ErrorHandler = func(w http.ResponseWriter, req *http.Request, err error) {
		observe(nil, err)
		up.proxy.ErrorHandler(w, req, err)
	}
	p.ServeHTTP(w, req)
}

// returnToHub ends every proxied watch the hub could serve. Each ends as
// kube-apiserver ends a watch at its timeout: the stream simply stops,
// and the kubelet watches again from its last resourceVersion, this time
// through the hub.
func (up *upstream) returnToHub() { up.returnToHubFor(nil) }

// returnToHubFor ends the proxied watches of the hub connection key alone
// (nil: every one). A watch on its way while it runs is ended too, of any
// key: it watches again, at worst through kube-apiserver again.
func (up *upstream) returnToHubFor(key *string) {
	up.returns.Add(1)
	up.mu.Lock()
	cut := make([]*cutBody, 0, len(up.cuttable))
	for b, k := range up.cuttable {
		if key == nil || *key == k {
			cut = append(cut, b)
		}
	}
	up.mu.Unlock()
	for _, b := range cut {
		if b.cut() {
			returnsToHub.Inc()
		}
	}
}

// cutBody is a response body that can be ended as if kube-apiserver had
// finished it: after cut, reads report io.EOF, not the error of the
// closed connection, so the proxy ends the response cleanly.
type cutBody struct {
	io.ReadCloser
	once sync.Once
	mu   sync.Mutex
	done bool // guarded by mu
}

// cut ends the body; it reports whether this call did, so that a watch
// cut twice is counted once.
func (b *cutBody) cut() (first bool) {
	b.once.Do(func() {
		first = true
		b.mu.Lock()
		b.done = true
		b.mu.Unlock()
		_ = b.ReadCloser.Close()
	})
	return first
}

func (b *cutBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.mu.Lock()
		if b.done {
			err = io.EOF
		}
		b.mu.Unlock()
	}
	return n, err
}
