package hub

import (
	"context"
	"slices"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/path"
	"k8s.io/apiserver/pkg/authorization/union"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	nodeauthorizer "github.com/nodeproxy/nodeproxy/authorizer"
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

// nodesEnterBulk lets node identities in at the door of the bulk API
// (create bulkgetoperations: a bulk get; watch bulkgetoperations: the bulk
// watch's websocket upgrade) without asking kube-apiserver.
//
// Why: the door grants nothing by itself, since every operation and every
// channel a node then asks for is decided by nodeproxy's graph alone
// (bulk/authorize.go). Asking kube-apiserver at the door made every node
// depend on kube-apiserver's RBAC for nothing, and in the worst moment:
// a kube-apiserver that has just restarted answers SubjectAccessReviews
// from RBAC informers that have not synced yet, so it denies what RBAC
// allows, and the delegated authorizer cached that denial
// (--authorization-webhook-cache-unauthorized-ttl) for every reconnect of
// that node. One node was locked out for 34 s that way (issue 14, item 5).
//
// What it costs: on the direct path, manifests/rbac-bulk.yaml no longer
// shuts nodes out of the bulk API; removing a node's access is done where
// it always was, in the graph (no pod, no object). Through kube-apiserver's
// aggregator, kube-apiserver still checks the binding itself before it
// proxies, uncached. A node whose name is empty ("system:node:") is not
// let in: the graph can decide nothing for it, so it goes to the
// delegated check as any other caller.
type nodesEnterBulk struct{}

const nodesEnterBulkReason = "node identities may use the bulk API; what they read is decided by nodeproxy's graph"

func (nodesEnterBulk) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if !isBulkEntry(a) {
		return authorizer.DecisionNoOpinion, "", nil
	}
	if name, isNode := nodeauthorizer.NodeName(a.GetUser()); !isNode || name == "" {
		return authorizer.DecisionNoOpinion, "", nil
	}
	bulkEntries.WithLabelValues(entryByNodeIdentity, "allow").Inc()
	return authorizer.DecisionAllow, nodesEnterBulkReason, nil
}

// isBulkEntry reports whether a is the door of the bulk API: the two verbs
// bulkgetoperations serves, on the resource itself.
func isBulkEntry(a authorizer.Attributes) bool {
	if !a.IsResourceRequest() || a.GetAPIGroup() != v1alpha1.GroupName || a.GetResource() != "bulkgetoperations" || a.GetSubresource() != "" {
		return false
	}
	return a.GetVerb() == "create" || a.GetVerb() == "watch"
}

// countedDelegation counts the bulk API entries kube-apiserver decided, so
// that denials at the door (the signature of a kube-apiserver whose RBAC
// is not warm, for callers other than nodes) show next to the nodes' own.
type countedDelegation struct{ authorizer.Authorizer }

func (c countedDelegation) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	decision, reason, err := c.Authorizer.Authorize(ctx, a)
	if isBulkEntry(a) {
		outcome := "deny"
		switch {
		case err != nil:
			outcome = "error"
		case decision == authorizer.DecisionAllow:
			outcome = "allow"
		}
		bulkEntries.WithLabelValues(entryDelegated, outcome).Inc()
	}
	return decision, reason, err
}

// withHealthOnlyForAnonymous puts the health paths, then the refusal of
// unauthenticated callers, then the nodes' entry to the bulk API, in front
// of the delegated authorizer.
func withHealthOnlyForAnonymous(healthPaths []string, delegated authorizer.Authorizer) (authorizer.Authorizer, error) {
	health, err := path.NewAuthorizer(healthPaths)
	if err != nil {
		return nil, err
	}
	return union.New(health, denyUnauthenticated{}, nodesEnterBulk{}, countedDelegation{delegated}), nil
}
