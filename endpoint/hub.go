package endpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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
// bulk gets for its lists, both as the node. The connection is redialed
// with backoff for as long as the endpoint runs; while it is down, the
// endpoint sends the kubelet's reads to kube-apiserver.
type Hub struct {
	cfg  *rest.Config
	rest rest.Interface
	// onUp is called after each successful dial, outside the lock.
	onUp func()

	mu   sync.Mutex
	conn *watchmux.Client // guarded by mu; nil while down
}

// hubBackoff paces redials: quick enough that a hub replica restarting
// behind its Service is found again within a second or two, capped so
// that a long outage costs a dial every 30 s per node.
var hubBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 16, Cap: 30 * time.Second}

// hubRequestTimeout bounds a bulk get: the hub answers from memory, so a
// slow answer means a sick hub, and kube-apiserver is the better bet.
const hubRequestTimeout = 10 * time.Second

// NewHub returns a hub client for cfg (the hub's address and the node's
// credentials). Run connects it.
func NewHub(cfg *rest.Config) (*Hub, error) {
	c := rest.CopyConfig(cfg)
	c.Timeout = hubRequestTimeout
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return askOnceOnTimeout{rt} })
	rc, err := restClient(c)
	if err != nil {
		return nil, fmt.Errorf("hub client for %s: %w", cfg.Host, err)
	}
	return &Hub{cfg: rest.CopyConfig(cfg), rest: rc}, nil
}

// Run keeps the bulk watch connection up until ctx ends.
func (h *Hub) Run(ctx context.Context) {
	backoff := hubBackoff
	for ctx.Err() == nil {
		dialCtx, cancel := context.WithTimeout(ctx, hubRequestTimeout)
		c, err := watchmux.Dial(dialCtx, h.cfg)
		cancel()
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
		hubDials.WithLabelValues("ok").Inc()
		backoff = hubBackoff
		h.mu.Lock()
		h.conn = c
		h.mu.Unlock()
		hubConnected.Set(1)
		klog.InfoS("Connected to the hub", "hub", h.cfg.Host)
		if h.onUp != nil {
			h.onUp()
		}
		select {
		case <-c.Done():
			klog.InfoS("Hub connection ended; reads go to kube-apiserver until it is back", "hub", h.cfg.Host, "reason", c.Err())
		case <-ctx.Done():
			_ = c.Close()
		}
		h.mu.Lock()
		h.conn = nil
		h.mu.Unlock()
		hubConnected.Set(0)
	}
}

// Connected reports whether the bulk watch connection is up.
func (h *Hub) Connected() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conn != nil
}

func (h *Hub) client() *watchmux.Client {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conn
}

// Watch opens a channel for op on the current connection. It returns the
// connection too, which the caller closes the channel on.
func (h *Hub) Watch(ctx context.Context, op v1alpha1.GetOperation) (*watchmux.Channel, *watchmux.Client, error) {
	c := h.client()
	if c == nil {
		return nil, nil, errHubDown
	}
	ctx, cancel := context.WithTimeout(ctx, hubRequestTimeout)
	defer cancel()
	ch, err := c.Watch(ctx, op)
	if err != nil {
		return nil, nil, err
	}
	return ch, c, nil
}

// Get answers op as one bulk get and returns its list, as JSON with
// apiVersion and kind. It does not try while the bulk watch connection is
// down: a hub that cannot hold a websocket is not worth a request's wait.
func (h *Hub) Get(ctx context.Context, op v1alpha1.GetOperation) (json.RawMessage, error) {
	if !h.Connected() {
		return nil, errHubDown
	}
	body, err := json.Marshal(&v1alpha1.BulkGetOperation{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "BulkGetOperation"},
		Spec:     v1alpha1.BulkGetOperationSpec{Operations: []v1alpha1.GetOperation{op}},
	})
	if err != nil {
		return nil, err
	}
	raw, err := h.rest.Post().AbsPath(watchmux.Path).SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Raw()
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
// as it is: a refusal (403), an object that does not exist (404), a
// resourceVersion too old (410). kube-apiserver would give the same
// answers, and asking it would only add load. Anything else (the hub
// unreachable, overloaded, failing, or refusing the form of the request)
// sends the request to kube-apiserver.
func decisive(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	switch status.Status().Code {
	case http.StatusForbidden, http.StatusNotFound, http.StatusGone:
		return true
	}
	return false
}

// askOnceOnTimeout takes Retry-After off the hub's 504s. The hub answers
// 504 "Too large resource version" to a read at a version it has not
// reached after waiting 3 s for it, with kube-apiserver's Retry-After: 1,
// on which client-go asks again; the kubelet's list at a version from
// another replica then waited out hubRequestTimeout (10.2 s measured in
// TestKubeletAheadOfTheHub) before going to kube-apiserver, which has the
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
