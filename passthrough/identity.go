package passthrough

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/transport"
)

// errNoUser is returned, before anything is sent, for a request whose
// context carries no caller: sending it would read as nodeproxy itself.
var errNoUser = errors.New("no user in the request context: nodeproxy does not read uncached types as itself")

// impersonation is how kube-apiserver is told who the caller is. It is
// shaped for constrained impersonation (KEP-5284, beta and on by default
// in Kubernetes 1.36), which grants nodeproxy the right to act as others
// only for the verbs it needs (list, watch), never to write:
//
//   - a node (system:node:<name>) is sent by name alone: the
//     arbitrary-node mode takes only a user name, and kube-apiserver
//     supplies the group system:nodes itself;
//   - a ServiceAccount (system:serviceaccount:<ns>:<name>) likewise by name
//     alone (serviceaccount mode; kube-apiserver supplies its groups);
//   - anyone else (user-info mode) with the user name, uid, groups and
//     extras exactly as they authenticated to nodeproxy.
//
// Sending groups with a node or a ServiceAccount would fall out of those
// modes into legacy impersonation, which the shipped role does not grant.
// The cost of name-only: a ServiceAccount token's extras (the pod it is
// bound to) do not reach kube-apiserver's authorizers; RBAC does not use
// them.
//
// Because kube-apiserver gives a node or a ServiceAccount named alone its
// fixed groups, a caller that merely carries such a name (a client
// certificate with CN system:node:x but not in system:nodes) would gain
// them: that is refused (errIdentity), never sent.
func impersonation(u user.Info) (transport.ImpersonationConfig, error) {
	name := u.GetName()
	switch {
	case name == "":
		return transport.ImpersonationConfig{}, errNoUser
	case strings.HasPrefix(name, nodeUserPrefix):
		if !slices.Contains(u.GetGroups(), user.NodesGroup) {
			return transport.ImpersonationConfig{}, fmt.Errorf("%w: %q is named as a node but is not in %s", errIdentity, name, user.NodesGroup)
		}
		return transport.ImpersonationConfig{UserName: name}, nil
	case strings.HasPrefix(name, serviceaccount.ServiceAccountUsernamePrefix):
		ns, _, err := serviceaccount.SplitUsername(name)
		if err != nil || !slices.Contains(u.GetGroups(), serviceaccount.MakeNamespaceGroupName(ns)) {
			return transport.ImpersonationConfig{}, fmt.Errorf("%w: %q is named as a ServiceAccount but is not in its groups", errIdentity, name)
		}
		return transport.ImpersonationConfig{UserName: name}, nil
	}
	return transport.ImpersonationConfig{UserName: name, UID: u.GetUID(), Groups: u.GetGroups(), Extra: u.GetExtra()}, nil
}

// nodeUserPrefix is how kube-apiserver's impersonation recognises a node.
const nodeUserPrefix = "system:node:"

// errIdentity: the caller's identity cannot be expressed to kube-apiserver
// without giving it more than it authenticated with.
var errIdentity = errors.New("identity cannot be impersonated faithfully")

// impersonating sends each request as the user in its context.
type impersonating struct {
	base http.RoundTripper
}

func (t impersonating) RoundTrip(req *http.Request) (*http.Response, error) {
	u, ok := request.UserFrom(req.Context())
	var cfg transport.ImpersonationConfig
	err := errNoUser
	if ok {
		cfg, err = impersonation(u)
	}
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	rt := transport.NewImpersonatingRoundTripper(cfg, t.base)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, fmt.Errorf("as %q: %w", u.GetName(), err)
	}
	return resp, nil
}
