package hub

import (
	"context"
	"errors"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// recordingAuthorizer stands in for kube-apiserver: it answers decision
// (or err) and remembers whether it was asked.
type recordingAuthorizer struct {
	decision authorizer.Decision
	err      error
	asked    bool
}

func (r *recordingAuthorizer) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	r.asked = true
	return r.decision, "kube-apiserver says so", r.err
}

// TestNodeEntersBulkAPIWithoutAskingKubeAPIServer: a node identity's
// create or watch on bulkgetoperations is allowed without a
// SubjectAccessReview, whatever kube-apiserver would answer (a
// kube-apiserver whose RBAC is not warm denies); anything else, and
// anyone else, is still delegated, and an error from the delegated check
// is never an allow.
func TestNodeEntersBulkAPIWithoutAskingKubeAPIServer(t *testing.T) {
	node := &user.DefaultInfo{Name: "system:node:node-a", Groups: []string{user.NodesGroup, user.AllAuthenticated}}
	nameless := &user.DefaultInfo{Name: "system:node:", Groups: []string{user.NodesGroup, user.AllAuthenticated}}
	notInGroup := &user.DefaultInfo{Name: "system:node:node-a", Groups: []string{user.AllAuthenticated}}
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}}
	bulk := func(u user.Info, verb string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: "bulk.k8s.io", APIVersion: "v1alpha1",
			Resource: "bulkgetoperations", ResourceRequest: true}
	}
	otherGroup := bulk(node, "watch")
	otherGroup.APIGroup = "example.com"
	subresource := bulk(node, "create")
	subresource.Subresource = "status"
	tests := []struct {
		name      string
		attrs     authorizer.AttributesRecord
		delegated authorizer.Decision
		err       error
		want      authorizer.Decision
		asked     bool
	}{
		{"node watches (websocket upgrade), kube-apiserver would deny", bulk(node, "watch"), authorizer.DecisionDeny, nil, authorizer.DecisionAllow, false},
		{"node creates (bulk get), kube-apiserver would deny", bulk(node, "create"), authorizer.DecisionDeny, nil, authorizer.DecisionAllow, false},
		{"node watches, kube-apiserver errs", bulk(node, "watch"), authorizer.DecisionNoOpinion, errors.New("connection refused"), authorizer.DecisionAllow, false},
		{"node deletes bulkgetoperations: delegated", bulk(node, "delete"), authorizer.DecisionDeny, nil, authorizer.DecisionDeny, true},
		{"node, other API group: delegated", otherGroup, authorizer.DecisionDeny, nil, authorizer.DecisionDeny, true},
		{"node, subresource: delegated", subresource, authorizer.DecisionDeny, nil, authorizer.DecisionDeny, true},
		{"node without a name: delegated", bulk(nameless, "watch"), authorizer.DecisionDeny, nil, authorizer.DecisionDeny, true},
		{"node name outside system:nodes: delegated", bulk(notInGroup, "watch"), authorizer.DecisionDeny, nil, authorizer.DecisionDeny, true},
		{"other user, allowed by kube-apiserver", bulk(alice, "watch"), authorizer.DecisionAllow, nil, authorizer.DecisionAllow, true},
		{"other user, denied by kube-apiserver", bulk(alice, "watch"), authorizer.DecisionDeny, nil, authorizer.DecisionDeny, true},
		{"other user, kube-apiserver errs: not an allow", bulk(alice, "create"), authorizer.DecisionNoOpinion, errors.New("connection refused"), authorizer.DecisionNoOpinion, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			delegated := &recordingAuthorizer{decision: tt.delegated, err: tt.err}
			a, err := withHealthOnlyForAnonymous([]string{"/healthz"}, delegated)
			if err != nil {
				t.Fatal(err)
			}
			got, _, _ := a.Authorize(context.Background(), tt.attrs)
			if got != tt.want || delegated.asked != tt.asked {
				t.Errorf("decision %v, kube-apiserver asked %v; want %v, asked %v", got, delegated.asked, tt.want, tt.asked)
			}
		})
	}
}
