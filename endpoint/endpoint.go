package endpoint

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/nodecopy/disk"
)

// maxStreamsPerConnection is kube-apiserver's default
// --http2-max-streams-per-connection.
const maxStreamsPerConnection = 1000

// Config is what an Endpoint needs.
type Config struct {
	// NodeName is the node the endpoint stands for; only
	// system:node:<NodeName> is served.
	NodeName string
	// APIServer reaches kube-apiserver as the node: its address and the
	// kubelet's client certificate files, which are re-read on rotation.
	APIServer *rest.Config
	// Hub reaches `nodeproxy serve` as the node. Nil: every request goes
	// to kube-apiserver.
	Hub *rest.Config
	// ClientCAFile verifies callers' certificates: the cluster's client
	// CA, which signs the kubelet's. Re-read when it changes.
	ClientCAFile string
	// ServingCertFile and ServingKeyFile are the endpoint's own TLS
	// certificate, for 127.0.0.1 and localhost. Re-read when they change.
	ServingCertFile, ServingKeyFile string
	// OfflineMaxAge bounds how old a copy of the node's view the
	// endpoint serves while neither the hub nor kube-apiserver answers:
	// zero is DefaultOfflineMaxAge, negative never.
	OfflineMaxAge time.Duration
	// NodeViewDir is where the copy is persisted, so that a restarted
	// endpoint or node starts from it; empty: not persisted.
	// NodeViewKey, if set, seals it (AES-256-GCM).
	NodeViewDir string
	NodeViewKey []byte
	// NoNodeView: no copy of the node's view; the kubelet's reads are
	// channels and bulk gets of the hub, one per read.
	NoNodeView bool
}

// Endpoint serves one node's kubelet.
type Endpoint struct {
	node     string
	hub      *Hub // nil: no hub configured
	upstream *upstream
	// clients are the hub connections of the node's other clients (nil
	// without a hub), and clientUpstream their way to kube-apiserver,
	// each with its own credential.
	clients        *clientHubs
	clientUpstream *upstream
	// tokens asks kube-apiserver whether it accepts a client's token
	// before a new read is served on the token's hub connection.
	tokens   *tokenCheck
	clientCA *fileContent[*x509.CertPool]
	serving  *fileContent[*tls.Certificate]
	handler  http.Handler
	// apiClient asks kube-apiserver's /readyz when the hub is down, and
	// reviews scrapers' tokens.
	apiClient *rest.RESTClient
	ready     *readiness
	scrapers  *scrapers
	// view keeps the copy of the node's view (nil without a hub), served
	// for at most offlineMaxAge while the node is offline.
	view          *viewFollower
	offlineMaxAge time.Duration
	// lease remembers the node's Lease from the kubelet's writes of it
	// (nil without a hub, when every read goes to kube-apiserver).
	lease *leaseMemory
}

// New checks cfg and builds the endpoint; Run serves it.
func New(cfg Config) (*Endpoint, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("the node name is required")
	}
	if cfg.APIServer == nil {
		return nil, errors.New("a kube-apiserver configuration is required")
	}
	RegisterMetrics()
	e := &Endpoint{node: cfg.NodeName, offlineMaxAge: cfg.OfflineMaxAge}
	if e.offlineMaxAge == 0 {
		e.offlineMaxAge = DefaultOfflineMaxAge
	}
	var err error
	if e.upstream, err = newUpstream(cfg.APIServer, kubelet); err != nil {
		return nil, fmt.Errorf("kube-apiserver at %s: %w", cfg.APIServer.Host, err)
	}
	if e.clientUpstream, err = newUpstream(rest.AnonymousClientConfig(cfg.APIServer), client); err != nil {
		return nil, fmt.Errorf("kube-apiserver at %s: %w", cfg.APIServer.Host, err)
	}
	api := rest.CopyConfig(cfg.APIServer)
	api.Timeout = readyProbeTimeout
	if e.apiClient, err = restClient(api); err != nil {
		return nil, fmt.Errorf("kube-apiserver at %s: %w", cfg.APIServer.Host, err)
	}
	if cfg.Hub != nil {
		if e.hub, err = NewHub(cfg.Hub); err != nil {
			return nil, err
		}
		// The hub being reachable again is news for every caller: the
		// clients' connections are dialed on their next read.
		e.clients = newClientHubs(cfg.Hub, func(id string) { e.clientUpstream.returnToHubFor(&id) })
		if e.tokens, err = newTokenCheck(cfg.APIServer); err != nil {
			return nil, fmt.Errorf("kube-apiserver at %s: %w", cfg.APIServer.Host, err)
		}
		e.clientUpstream.accepted = e.clients.vouch
		e.lease = newLeaseMemory(cfg.NodeName)
	}
	if cfg.Hub != nil && !cfg.NoNodeView {
		e.view = newViewFollower(e.hub, cfg.NodeName)
		if cfg.NodeViewDir != "" {
			if e.view.store, err = disk.Open(cfg.NodeViewDir, cfg.NodeViewKey); err != nil {
				return nil, fmt.Errorf("the node view's directory: %w", err)
			}
			if e.view.cluster, err = clusterOf(cfg.APIServer); err != nil {
				return nil, err
			}
			e.view.restore()
		}
		e.hub.onUp = func() {
			if e.view != nil {
				// The kubelet's watches come back to the copy: once it
				// has caught up, or they would land on hub channels.
				caughtUp := e.view.connected()
				go func() {
					select {
					case <-caughtUp:
					case <-time.After(hubRequestTimeout):
					}
					e.upstream.returnToHub()
				}()
			} else {
				e.upstream.returnToHub()
			}
			e.clients.forgetFailures()
			e.clientUpstream.returnToHub()
		}
	}
	if e.clientCA, err = newFileContent(caPool, cfg.ClientCAFile); err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	if e.serving, err = newFileContent(keyPair, cfg.ServingCertFile, cfg.ServingKeyFile); err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	e.ready = newReadiness(e.hub, e.apiClient)
	e.ready.view, e.ready.offlineMaxAge = e.view, e.offlineMaxAge
	mux := http.NewServeMux()
	mux.HandleFunc("/livez", livez)
	mux.Handle("/readyz", e.ready)
	mux.Handle("/healthz", e.ready)
	authenticated := http.NewServeMux()
	authenticated.Handle("/metrics", legacyregistry.Handler())
	authenticated.HandleFunc("/", e.serveKubelet)
	mux.Handle("/", newCallers(cfg.NodeName, e.clientCA, authenticated, http.HandlerFunc(e.serveClient)))
	e.handler = mux
	e.scrapers = newScrapers(e.apiClient)
	return e, nil
}

func livez(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }

// serveKubelet answers an authenticated request of the kubelet: its get
// of its Lease from the endpoint's memory of it; a read of the node's
// view from the copy; from the hub when it is a read the hub serves and
// the hub can answer; from kube-apiserver otherwise. Its frame is under
// every watch of the copy for the watch's life, so what only the other
// ways need is serveKubeletElsewhere's.
func (e *Endpoint) serveKubelet(w http.ResponseWriter, req *http.Request) {
	// Parsed once: both the route and the metrics' names come from it.
	info, err := requestInfo.NewRequestInfo(req)
	if err != nil {
		info = nil
	}
	if e.lease != nil && e.serveLease(w, req, info, leaseRoute(req, info, e.node)) {
		return
	}
	cr, toCopy := copyRoute(req, info, e.node)
	if toCopy && e.serveFromCopy(w, req, cr) {
		return
	}
	if !toCopy || e.view == nil {
		cr = nil
	}
	e.serveKubeletElsewhere(w, req, info, cr)
}

// serveKubeletElsewhere answers what the copy does not: from the hub
// when it can, from kube-apiserver otherwise. cr, if not nil, is the
// read of the view the copy did not answer: what the kubelet is served
// of it the copy takes in (observe.go).
func (e *Endpoint) serveKubeletElsewhere(w http.ResponseWriter, req *http.Request, info *apirequest.RequestInfo, cr *copyRead) {
	r, hubServed := hubRoute(req, info, e.node, kubelet)
	r.toCopy = cr
	if hubServed && e.hub != nil && e.serveRead(w, req, r, e.hub) {
		return
	}
	var observe func(*http.Response)
	if cr != nil {
		observe = func(resp *http.Response) { e.observeResponse(resp, cr) }
	}
	resource, verb := describe(req, info)
	e.upstream.serve(w, req, resource, verb, hubServed && e.hub != nil && verb == "watch", clientKey{}, observe)
}

// serveClient answers a request of another client of the node, one with
// a bearer token and no certificate, with that token: from the hub over
// the client's own connection when it is a read the hub serves and the
// hub can answer, from kube-apiserver otherwise.
func (e *Endpoint) serveClient(w http.ResponseWriter, req *http.Request) {
	info, err := requestInfo.NewRequestInfo(req)
	if err != nil {
		info = nil
	}
	r, hubServed := hubRoute(req, info, e.node, client)
	hubServed = hubServed && e.clients != nil
	key := keyOf(req)
	if hubServed {
		hub, asked, release := e.clients.acquire(req.Context(), key)
		if hub != nil && asked {
			if refused, err := e.tokens.refuses(req.Context(), key); refused {
				// kube-apiserver refuses the token now: it answers the
				// read, below, as it would directly.
				release()
				e.clients.refuseToken(key.id, err)
				hub = nil
			}
		}
		if hub != nil {
			served := e.serveRead(w, req, r, hub.(*Hub))
			release()
			if served {
				return
			}
		} else {
			e.noteFallback(errHubDown, r)
		}
	}
	resource, verb := describe(req, info)
	if hubServed && verb != "watch" && e.clients.refused(key.id) {
		// kube-apiserver's answer says whether it accepts the token
		// the hub refused.
		e.clientUpstream.serveObserved(w, req, resource, verb, func(resp *http.Response, _ error) {
			if resp != nil && resp.StatusCode/100 == 2 {
				e.clients.accepted(key)
			}
		})
		return
	}
	e.clientUpstream.serve(w, req, resource, verb, hubServed && verb == "watch", key, nil)
}

// describe names a request for metrics, as kube-apiserver would, within
// fixed sets: a resource or subresource outside metricResources and
// metricSubresources is "other". The path is the caller's to choose (a
// local process with any token reaches the endpoint), and an unbounded
// label is a memory leak in every scraper.
func describe(req *http.Request, info *apirequest.RequestInfo) (resource, verb string) {
	if info == nil || !info.IsResourceRequest {
		return "", metricVerb(strings.ToLower(req.Method))
	}
	resource = info.Resource
	if !metricResources.Has(resource) {
		resource = "other"
	}
	if info.Subresource != "" {
		sub := info.Subresource
		if !metricSubresources.Has(sub) {
			sub = "other"
		}
		return resource + "/" + sub, metricVerb(info.Verb)
	}
	return resource, metricVerb(info.Verb)
}

// metricResources are the resources node clients (the kubelet,
// kube-proxy) read and write, as metric label values.
var metricResources = sets.New(
	"pods", "nodes", "secrets", "configmaps", "services", "endpoints", "endpointslices", "servicecidrs",
	"runtimeclasses", "csidrivers", "csinodes", "leases", "events", "persistentvolumeclaims", "persistentvolumes",
	"serviceaccounts", "namespaces", "certificatesigningrequests", "volumeattachments", "resourceslices",
	"resourceclaims", "tokenreviews", "subjectaccessreviews", "selfsubjectreviews", "storageclasses",
	"clustertrustbundles", "podcertificaterequests",
)

// metricSubresources likewise.
var metricSubresources = sets.New("status", "token", "eviction", "binding", "log", "exec", "attach", "portforward", "proxy")

// metricVerbs are the verbs a request metric names: kube-apiserver's
// (its metrics' validRequestMethods, lower-cased as RequestInfo words
// them) and the HTTP methods of non-resource requests. A request's
// method is the caller's to choose; anything else is "other", so that the
// series stay a fixed set.
var metricVerbs = sets.New(
	"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "proxy", "connect",
	"post", "put", "head", "options",
)

func metricVerb(verb string) string {
	if metricVerbs.Has(verb) {
		return verb
	}
	return "other"
}

// Run serves on ln over TLS until ctx ends, keeping the hub connection and
// the certificates current; then it stops accepting, ends the watches
// and waits for requests in flight.
func (e *Endpoint) Run(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if e.hub != nil {
		wg.Go(func() { e.hub.Run(ctx) })
		wg.Go(func() { e.clients.run(ctx) })
	}
	if e.view != nil {
		wg.Go(func() { e.view.run(ctx) })
		if e.view.store != nil {
			wg.Go(func() { e.view.persist(ctx) })
		}
		wg.Go(func() { e.watchOffline(ctx) })
	}
	// Verified by the authenticator, against the CA as it is now.
	return e.serve(ctx, ln, e.handler, tls.RequestClientCert)
}

// RunMetrics serves /metrics to scrapers kube-apiserver allows (see
// scrapers), and /livez and /readyz, on ln over TLS until ctx ends. It
// runs beside Run, on an address other hosts reach.
func (e *Endpoint) RunMetrics(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/livez", livez)
	mux.Handle("/readyz", e.ready)
	mux.Handle("/metrics", e.scrapers.wrap("/metrics", legacyregistry.Handler()))
	return e.serve(ctx, ln, mux, tls.NoClientCert)
}

func (e *Endpoint) serve(ctx context.Context, ln net.Listener, handler http.Handler, clientAuth tls.ClientAuthType) error {
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			ClientAuth:     clientAuth,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return e.serving.get(), nil },
		},
		BaseContext: func(net.Listener) context.Context { return ctx },
		// A kubelet multiplexes its watches, one per secret and configmap
		// its pods use, over HTTP/2. Past Go's default of 250 streams its
		// client opens more connections; kube-apiserver allows 1000
		// (--http2-max-streams-per-connection), and so does the endpoint,
		// so a full node keeps to one connection here as it does there.
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: maxStreamsPerConnection},
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	// Watches do not end by themselves; ctx (their base) has ended them.
	if err := srv.Shutdown(shutdownCtx); err != nil {
		klog.ErrorS(err, "Shutting down the node endpoint")
	}
	return nil
}
