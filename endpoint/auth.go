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

// nodeOnly lets through only the node this endpoint stands for: a client
// certificate chained to the cluster's client CA, naming
// system:node:<node> in group system:nodes, as kube-apiserver's x509
// authenticator and the Node authorizer read it. Without that certificate
// any local process could act as the node: there is no other way in.
type nodeOnly struct {
	node  string
	authn *x509request.Authenticator
	next  http.Handler
}

func newNodeOnly(node string, clientCA *fileContent[*x509.CertPool], next http.Handler) *nodeOnly {
	verify := func() (x509.VerifyOptions, bool) {
		opts := x509request.DefaultVerifyOptions()
		opts.Roots = clientCA.get()
		return opts, true
	}
	return &nodeOnly{
		node:  node,
		authn: x509request.NewDynamic(verify, x509request.CommonNameUserConversion),
		next:  next,
	}
}

func (n *nodeOnly) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	resp, ok, err := n.authn.AuthenticateRequest(req)
	if err != nil || !ok {
		refused.WithLabelValues("unauthenticated").Inc()
		msg := "a client certificate signed by the cluster's client CA is required"
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
	n.next.ServeHTTP(w, req)
}

var schemaEndpoint = schema.GroupResource{Group: "nodeproxy.io", Resource: "node-endpoint"}
