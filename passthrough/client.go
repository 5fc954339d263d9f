package passthrough

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// Client reads uncached types from kube-apiserver as the caller.
type Client struct {
	*Resolver
	rest rest.Interface
	// http sends watches: their body is read as a stream of raw events,
	// never decoded into Go types (a CRD's or an aggregated API's objects
	// have none here).
	http *http.Client
	// watchTimeout picks each upstream watch's timeoutSeconds.
	watchTimeout func() time.Duration
}

// NewClient reaches kube-apiserver with cfg (nodeproxy's own
// credentials, which carry the impersonation grant; see
// docs/operations.md). Discovery is read as nodeproxy; every list and
// watch as the user in the request's context.
func NewClient(cfg *rest.Config) (*Client, error) {
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client for uncached types: %w", err)
	}
	c := rest.CopyConfig(cfg)
	// No client-side rate limit: each operation is one a caller made, and
	// kube-apiserver's priority and fairness classifies the request as the
	// impersonated caller, so a busy caller is held back there, by its own
	// flow, not by a limit shared with every other caller of this hub.
	c.QPS = -1
	c.ContentType = "application/json"
	c.AcceptContentTypes = "application/json"
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	c.GroupVersion = nil
	c.APIPath = ""
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return impersonating{base: rt} })
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("HTTP client for uncached types: %w", err)
	}
	rc, err := rest.UnversionedRESTClientForConfigAndClient(c, hc)
	if err != nil {
		return nil, fmt.Errorf("client for uncached types: %w", err)
	}
	return &Client{Resolver: NewResolver(disc), rest: rc, http: hc, watchTimeout: reflectorWatchTimeout}, nil
}

// parameterVersion is the version list options are encoded in: metav1's
// options are registered unversioned, under v1.
var parameterVersion = schema.GroupVersion{Version: "v1"}

// List lists t in namespace ("" for all, or a cluster-scoped type) with
// opts, as the user in ctx, and returns kube-apiserver's answer, a list
// of the type as JSON (its own resourceVersion and continue token). A
// refusal or any other failure is kube-apiserver's own Status error.
func (c *Client) List(ctx context.Context, t Type, namespace string, opts *metav1.ListOptions) ([]byte, error) {
	if err := checkCaller(ctx); err != nil {
		observe(verbList, err)
		return nil, err
	}
	raw, err := c.request(t, namespace).
		SpecificallyVersionedParams(opts, metav1.ParameterCodec, parameterVersion).
		Do(ctx).Raw()
	err = apiError("list", t, raw, err)
	observe(verbList, err)
	if err != nil {
		return nil, err
	}
	return bytes.TrimRight(raw, "\n"), nil
}

func (c *Client) request(t Type, namespace string) *rest.Request {
	prefix := []string{"/apis", t.Resource.Group, t.Resource.Version}
	if t.Resource.Group == "" {
		prefix = []string{"/api", t.Resource.Version}
	}
	return c.rest.Get().AbsPath(prefix...).Namespace(namespace).Resource(t.Resource.Resource)
}

// checkCaller refuses, before anything is sent, a request whose caller
// cannot be impersonated faithfully.
func checkCaller(ctx context.Context) error {
	u, ok := request.UserFrom(ctx)
	if !ok {
		return apierrors.NewInternalError(errNoUser)
	}
	if _, err := impersonation(u); err != nil {
		if errors.Is(err, errIdentity) {
			return apierrors.NewForbidden(schema.GroupResource{}, "", err)
		}
		return apierrors.NewInternalError(err)
	}
	return nil
}

// apiError returns kube-apiserver's Status as it sent it (body), and
// turns anything else (the connection failed) into a 500 naming what
// failed. The body is decoded here rather than by client-go: a client of
// no group/version does not decode Status bodies (it reports "unknown").
func apiError(verb string, t Type, body []byte, err error) error {
	if err == nil {
		return nil
	}
	var status metav1.Status
	if json.Unmarshal(body, &status) == nil && status.Kind == "Status" && status.Status == metav1.StatusFailure {
		return &apierrors.StatusError{ErrStatus: status}
	}
	return apierrors.NewInternalError(fmt.Errorf("%s %s as the caller: %w", verb, t.Resource, err))
}
