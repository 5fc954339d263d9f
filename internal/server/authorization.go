package server

import (
	"context"
	"slices"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/path"
	"k8s.io/apiserver/pkg/authorization/union"
)

// denyUnauthenticated refuses every request from a caller who presented no
// credentials. k8s.io/apiserver's delegated authentication always lets
// such callers through as system:anonymous and leaves the decision to
// kube-apiserver's RBAC, which a cluster may have opened up; nodeproxy
// serves nothing to strangers but health checks, whatever the cluster's
// RBAC says, and saves the SubjectAccessReview round trip doing so.
type denyUnauthenticated struct{}

const unauthenticatedReason = "nodeproxy serves unauthenticated requests only on its health endpoints"

func (denyUnauthenticated) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	u := a.GetUser()
	if u == nil || u.GetName() == user.Anonymous || slices.Contains(u.GetGroups(), user.AllUnauthenticated) {
		return authorizer.DecisionDeny, unauthenticatedReason, nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// withHealthOnlyForAnonymous puts the health paths, then the refusal of
// unauthenticated callers, in front of the delegated authorizer.
func withHealthOnlyForAnonymous(healthPaths []string, delegated authorizer.Authorizer) (authorizer.Authorizer, error) {
	health, err := path.NewAuthorizer(healthPaths)
	if err != nil {
		return nil, err
	}
	return union.New(health, denyUnauthenticated{}, delegated), nil
}
