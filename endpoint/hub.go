package endpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// errHubDown is the answer of a hub with no connection: the caller goes
// to kube-apiserver without waiting.
var errHubDown = errors.New("no connection to the hub")

// Hub is the endpoint's one connection to `nodeproxy serve`: a bulk watch
// websocket that carries every watch of the kubelet as a channel, and
// bulk gets for its lists, both as the node.
//
// The connection is a watchmux.Session: when it ends (a replica rolled,
// killed, or gone silent), the session dials the hub's address again,
// which lands on another replica behind the Service, and carries every
// channel over from the last resourceVersion the kubelet was sent. The
// kubelet's watches do not end; at worst one gets ERROR 410 and the
// kubelet relists, as it would from kube-apiserver. A channel the session
// cannot carry over within hubResumeTimeout (no replica answers) ends
// cleanly, and the kubelet's next watch goes to kube-apiserver; while no
// connection is up, reads go there too.
//
// A sharded hub redirects the connection to the replica that owns the
// node (watchmux follows it); the bulk gets then go to that replica too,
// for as long as the connection to it is up, and back to the hub's
// address once it is not.
type Hub struct {
	cfg  *rest.Config
	rest rest.Interface
	// server is cfg's address, scheme and host: where the bulk gets go
	// unless the connection went elsewhere.
	server string
	// onUp is called each time the connection is up again, from the
	// session's goroutine.
	onUp func()

	mu      sync.Mutex
	session *watchmux.Session // guarded by mu; nil until the first dial
	// owner and ownerREST: the replica the connection was last
	// redirected to, and a client of it for the bulk gets.
	owner     string         // guarded by mu
	ownerREST rest.Interface // guarded by mu
	// up is closed, and replaced, each time the connection comes up
	// and when session is set.
	up chan struct{} // guarded by mu
}

// hubBackoff paces the first dials, until one succeeds: quick enough that
// a hub starting beside the endpoint is found within a second or two,
// capped so that a long outage costs a dial every 30 s per node. Once
// connected, the session redials by its own backoff (100 ms doubling to
// 10 s, after a random pause of up to 100 ms).
var hubBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 16, Cap: 30 * time.Second}

// hubRequestTimeout bounds a bulk get: the hub answers from memory, so a
// slow answer means a sick hub, and kube-apiserver is the better bet.
const hubRequestTimeout = 10 * time.Second

// hubResumeTimeout is how long a kubelet watch waits, silent, for its
// channel to be carried to another hub replica before it ends and the
// kubelet watches kube-apiserver instead. It covers, with room, both a
// rolling restart's resume (docs/operations.md, "Replicas and rollouts")
// and the session's own redials after four failed dials (1.5-3 s by its
// backoff), and keeps a watch that no replica can take
// from going stale for long: the kubelet's own watches on kube-apiserver
// would have been ended by the same outage.
const hubResumeTimeout = 5 * time.Second

// NewHub returns a hub client for cfg (the hub's address and the node's
// credentials). Run connects it.
func NewHub(cfg *rest.Config) (*Hub, error) {
	rc, err := hubREST(cfg)
	if err != nil {
		return nil, fmt.Errorf("hub client for %s: %w", cfg.Host, err)
	}
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("hub address %q: %w", cfg.Host, err)
	}
	return &Hub{cfg: rest.CopyConfig(cfg), rest: rc, server: base.Scheme + "://" + base.Host, up: make(chan struct{})}, nil
}

// hubREST is the bulk gets' client of the hub at cfg.
func hubREST(cfg *rest.Config) (rest.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.Timeout = hubRequestTimeout
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return askOnceOnTimeout{rt} })
	return restClient(c)
}

// restFor is the client of the bulk gets while the connection is to
// server: the hub's address, or the replica a sharded hub redirected the
// connection to (the same credentials and CA, its host the server name).
// A replica's client that cannot be made leaves the gets at the hub's
// address, which redirects them.
func (h *Hub) restFor(server string) rest.Interface {
	if server == "" || server == h.server {
		return h.rest
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.owner == server {
		return h.ownerREST
	}
	u, err := url.Parse(server)
	if err != nil {
		return h.rest
	}
	c := rest.CopyConfig(h.cfg)
	c.Host, c.TLSClientConfig.ServerName = server, u.Hostname()
	rc, err := hubREST(c)
	if err != nil {
		klog.ErrorS(err, "Client of the hub replica the connection was redirected to; bulk gets go to the hub's address", "replica", server)
		return h.rest
	}
	h.owner, h.ownerREST = server, rc
	return rc
}

// Run dials the hub until a session is up, then keeps it until ctx ends.
func (h *Hub) Run(ctx context.Context) {
	backoff := hubBackoff
	for ctx.Err() == nil {
		s, err := watchmux.NewSession(ctx, h.cfg,
			watchmux.WithResumeTimeout(hubResumeTimeout),
			watchmux.WithConnectionObserver(h.connection))
		if err != nil {
			hubDials.WithLabelValues("error").Inc()
			wait := backoff.Step()
			klog.ErrorS(err, "Hub unreachable; reads go to kube-apiserver", "hub", h.cfg.Host, "retryIn", wait.Round(time.Millisecond))
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
			continue
		}
		h.mu.Lock()
		h.session = s
		h.wakeLocked() // its first connection came up before this
		h.mu.Unlock()
		<-ctx.Done()
		_ = s.Close()
	}
}

// connection follows the session's connection: its gauge, its log, and
// the proxied watches sent back to the hub when it is up again.
func (h *Hub) connection(up bool) {
	if !up {
		hubConnected.Set(0)
		klog.InfoS("Hub connection ended; carrying the watches over to another replica, reads go to kube-apiserver meanwhile", "hub", h.cfg.Host)
		return
	}
	hubDials.WithLabelValues("ok").Inc()
	hubConnected.Set(1)
	klog.InfoS("Connected to the hub", "hub", h.cfg.Host)
	h.mu.Lock()
	h.wakeLocked()
	h.mu.Unlock()
	if h.onUp != nil {
		h.onUp()
	}
}

// close ends the session, if any, and its channels.
func (h *Hub) close() {
	h.mu.Lock()
	s := h.session
	h.mu.Unlock()
	if s != nil {
		_ = s.Close()
	}
}

// Connected reports whether the bulk watch connection is up.
func (h *Hub) Connected() bool {
	return h.connected() != nil
}

// wakeLocked closes up: the connection came up, or the session that has
// it was set.
func (h *Hub) wakeLocked() {
	close(h.up)
	h.up = make(chan struct{})
}

// nextUp is a channel closed the next time the connection comes up (or
// the session that has it is set).
func (h *Hub) nextUp() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.up
}

// connected is the session while it has a connection up, else nil.
func (h *Hub) connected() *watchmux.Session {
	h.mu.Lock()
	s := h.session
	h.mu.Unlock()
	if s == nil || !s.Connected() {
		return nil
	}
	return s
}

// Watch opens a channel for op, which lives on across the hub's
// connections; the caller closes it. With protobuf, the channel asks for
// its objects in protobuf, which a hub that can sends (watchmux.Event
// says which it sent).
func (h *Hub) Watch(ctx context.Context, op v1alpha1.GetOperation, protobuf bool) (*watchmux.SessionChannel, error) {
	s := h.connected()
	if s == nil {
		return nil, errHubDown
	}
	ctx, cancel := context.WithTimeout(ctx, hubRequestTimeout)
	defer cancel()
	if protobuf {
		return s.Watch(ctx, op, watchmux.InProtobuf())
	}
	return s.Watch(ctx, op)
}

// Get answers op as one bulk get and returns its list, as JSON with
// apiVersion and kind. It does not try while the bulk watch connection is
// down: a hub that cannot hold a websocket is not worth a request's wait.
func (h *Hub) Get(ctx context.Context, op v1alpha1.GetOperation) (json.RawMessage, error) {
	s := h.connected()
	if s == nil {
		return nil, errHubDown
	}
	body, err := json.Marshal(&v1alpha1.BulkGetOperation{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "BulkGetOperation"},
		Spec:     v1alpha1.BulkGetOperationSpec{Operations: []v1alpha1.GetOperation{op}},
	})
	if err != nil {
		return nil, err
	}
	raw, err := h.restFor(s.Server()).Post().AbsPath(watchmux.Path).SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	var answer v1alpha1.BulkGetOperation
	if err := json.Unmarshal(raw, &answer); err != nil {
		return nil, fmt.Errorf("hub's bulk get answer: %w", err)
	}
	if n := len(answer.Status.Results); n != 1 {
		return nil, fmt.Errorf("hub answered %d results to one operation", n)
	}
	return answer.Status.Results[0].Raw, nil
}

// decisive reports whether err is the hub's answer to give the kubelet
// as it is: a refusal (403) or a resourceVersion too old (410).
// kube-apiserver would give the same answers, and asking it would only
// add load. Anything else (the hub unreachable, overloaded, failing, or
// refusing the form of the request) sends the request to kube-apiserver.
//
// A 404 is not the hub's: it answers a get of a missing object with an
// empty list (serveRead words the 404 itself), and answers 422, not 404,
// to an operation on a type it does not know. A 404 comes from something
// between the endpoint and the hub (a wrong path, a replica of an older
// version without the API, a proxy) and says nothing about the object.
func decisive(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	switch status.Status().Code {
	case http.StatusForbidden, http.StatusGone:
		return true
	}
	return false
}

// askOnceOnTimeout takes Retry-After off the hub's 504s. The hub answers
// 504 "Too large resource version" to a read at a version it has not
// reached after waiting 3 s for it, with kube-apiserver's Retry-After: 1,
// on which client-go asks again; the kubelet's list at a version from
// another replica then waited out the whole hubRequestTimeout
// (TestKubeletAheadOfTheHub) before going to kube-apiserver, which has the
// version now. A 429 keeps its Retry-After: the hub is busy, not behind.
type askOnceOnTimeout struct{ next http.RoundTripper }

func (t askOnceOnTimeout) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusGatewayTimeout {
		resp.Header.Del("Retry-After")
	}
	return resp, err
}

// restClient is a core/v1 REST client for cfg, of the endpoint's own
// scheme.
func restClient(cfg *rest.Config) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion, c.APIPath, c.NegotiatedSerializer = &coreV1, "/api", codecs
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(c)
}
