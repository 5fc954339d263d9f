package hub

import (
	"context"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// withoutCredentialID asks next about a caller without the credential ID
// its authenticator put in its extra (user.CredentialIDKey: one per
// ServiceAccount token, one per client certificate).
//
// Why: the delegated authorizer caches kube-apiserver's answers by the
// whole review, extra included, and the hub asks again about every open
// channel of such a caller at each round (after an RBAC change naming
// it, every --watch-reauthorize-interval where set). Every kube-proxy
// has a token of its own, so with the ID every node's channels are
// reviews of their own at each round, growing with the cluster; without
// it, one review of kube-proxy's ServiceAccount answers them all, as
// long as the answer is cached. (A pod-bound token's extra also names
// its pod, which is kept: such tokens' reviews stay one per pod.)
//
// What it costs: an authorizer that decides by the credential ID (RBAC
// does not read the extra; a webhook or a CEL authorization condition
// could) is not shown it here, where kube-apiserver would show it for the
// same read. docs/api.md ("Authorization") states it as a deviation.
// Bulk reads only: the door of the bulk API (one review per connection)
// is asked with the ID.
type withoutCredentialID struct{ next authorizer.Authorizer }

func (w withoutCredentialID) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	u := a.GetUser()
	if u == nil {
		return w.next.Authorize(ctx, a)
	}
	if _, ok := u.GetExtra()[user.CredentialIDKey]; !ok {
		return w.next.Authorize(ctx, a)
	}
	extra := make(map[string][]string, len(u.GetExtra())-1)
	for k, v := range u.GetExtra() {
		if k != user.CredentialIDKey {
			extra[k] = v
		}
	}
	record := authorizer.AttributesRecord{
		User:            &user.DefaultInfo{Name: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(), Extra: extra},
		Verb:            a.GetVerb(),
		Namespace:       a.GetNamespace(),
		APIGroup:        a.GetAPIGroup(),
		APIVersion:      a.GetAPIVersion(),
		Resource:        a.GetResource(),
		Subresource:     a.GetSubresource(),
		Name:            a.GetName(),
		ResourceRequest: a.IsResourceRequest(),
		Path:            a.GetPath(),
	}
	record.FieldSelectorRequirements, record.FieldSelectorParsingErr = a.GetFieldSelector()
	record.LabelSelectorRequirements, record.LabelSelectorParsingErr = a.GetLabelSelector()
	return w.next.Authorize(ctx, record)
}
