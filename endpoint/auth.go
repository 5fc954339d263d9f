package endpoint

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"
)

// callers sorts requests by who sent them. The node this endpoint stands
// for presents a client certificate chained to the cluster's client CA,
// naming system:node:<node> in group system:nodes, as kube-apiserver's
// x509 authenticator and the Node authorizer read it: its requests go to
// node, which acts as the node. Any other certificate is 403: the
// endpoint cannot act as it, and will not act as the node for it.
//
// A request without a certificate but with a bearer token (kube-proxy's
// ServiceAccount token) goes to client, which carries that token and
// nothing else: to the hub, which authenticates it, and to
// kube-apiserver. The endpoint never checks such a token itself, and
// never lends it the node's identity; a token neither accepts is their
// 401. A request with neither is 401 here.
type callers struct {
	node            string
	authn           *x509request.Authenticator
	kubelet, client http.Handler
}

func newCallers(node string, clientCA *fileContent[*x509.CertPool], kubelet, client http.Handler) *callers {
	verify := func() (x509.VerifyOptions, bool) {
		opts := x509request.DefaultVerifyOptions()
		opts.Roots = clientCA.get()
		return opts, true
	}
	return &callers{
		node:    node,
		authn:   x509request.NewDynamic(verify, x509request.CommonNameUserConversion),
		kubelet: kubelet,
		client:  client,
	}
}

func (n *callers) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	resp, ok, err := n.authn.AuthenticateRequest(req)
	if err == nil && !ok {
		if _, ok := bearerToken(req); ok {
			n.client.ServeHTTP(w, req)
			return
		}
	}
	if err != nil || !ok {
		refused.WithLabelValues("unauthenticated").Inc()
		msg := "the node's client certificate, signed by the cluster's client CA, or a bearer token is required"
		if err != nil {
			msg += ": " + err.Error()
		}
		writeError(w, req, apierrors.NewUnauthorized(msg))
		return
	}
	if u := resp.User; u.GetName() != "system:node:"+n.node || !slices.Contains(u.GetGroups(), user.NodesGroup) {
		refused.WithLabelValues("forbidden").Inc()
		writeError(w, req, apierrors.NewForbidden(
			// A Status needs a resource; the endpoint refuses the caller, not one.
			schemaEndpoint, req.URL.Path,
			fmt.Errorf("this endpoint serves only system:node:%s (group %s), not %q %v", n.node, user.NodesGroup, u.GetName(), u.GetGroups())))
		return
	}
	n.kubelet.ServeHTTP(w, req)
}

var schemaEndpoint = schema.GroupResource{Group: "nodeproxy.io", Resource: "node-endpoint"}
