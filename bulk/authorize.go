package bulk

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"

	nodeauthorizer "github.com/nodeproxy/nodeproxy/authorizer"
)

// Authorize decides one operation of a cached type for u: nil, 403, or,
// when the authorizer failed, 500 (never an allow on error). A bulk get
// is allowed only if every operation is; a watch channel is decided when
// it opens, and again as long as it is open.
//
// Node identities are decided as kube-apiserver's chain Node,RBAC decides
// them. On the types the graph decides (GraphDecided) the node authorizer
// alone: asking kube-apiserver would come back to nodeproxy's own webhook
// for the same answer, and a "no" from the graph is final. On the
// cluster-wide types the node authorizer's static rules (the system:node
// role's: services, runtimeclasses, csidrivers) allow what they allow;
// where they have no opinion (endpointslices, servicecidrs) the delegated
// authorizer is asked, as RBAC would be after the Node authorizer.
// Everyone else is asked of kube-apiserver (delegated, cached per
// identity and attributes) as the list it amounts to.
func (c *Catalog) Authorize(ctx context.Context, u user.Info, q *Query) error {
	// The attributes live in the query, which is on the heap already:
	// built on the stack they would escape through the interface, one
	// allocation per operation.
	q.attrs = q.attributes(u)
	attrs := &q.attrs
	node, isNode := nodeauthorizer.NodeName(u)
	var (
		decision authorizer.Decision
		reason   string
		err      error
	)
	switch {
	case isNode && q.reachableFrom != "":
		// The answer is filtered by the graph, so the only question is
		// whose graph.
		if node == q.reachableFrom {
			decision = authorizer.DecisionAllow
		} else {
			reason = "a node may only ask for what it reaches itself"
		}
	case isNode:
		if q.NamesOneObject() && !q.watch {
			// A bulk get of one named object reads what a get would:
			// the graph's question is "get". A channel stays "watch":
			// the Node authorizer lets nodes only get claims, volumes,
			// attachments and resource claims, never watch them.
			attrs.Verb = "get"
		}
		decision, reason, err = c.nodes.Authorize(ctx, attrs)
		if decision == authorizer.DecisionNoOpinion && err == nil && !q.GraphDecided() {
			decision, reason, err = c.delegated.Authorize(ctx, attrs)
		}
	default:
		decision, reason, err = c.delegated.Authorize(ctx, attrs)
	}
	c.decisions[q.store].observe(decision == authorizer.DecisionAllow)
	if decision == authorizer.DecisionAllow {
		return nil
	}
	if err != nil {
		// Never an allow on error, and not a plain "no" either: the
		// caller should retry, as kube-apiserver's own filter says.
		return apierrors.NewInternalError(fmt.Errorf("%s: authorization check failed: %w", q.Path(), err))
	}
	klog.V(2).InfoS("Bulk get operation refused", "user", u.GetName(), "operation", q.index, "verb", attrs.Verb,
		"resource", attrs.Resource, "namespace", attrs.Namespace, "name", attrs.Name, "reason", reason)
	what := fmt.Sprintf("User %q cannot %s %s", u.GetName(), attrs.Verb, attrs.Resource)
	if attrs.Namespace != "" {
		what += fmt.Sprintf(" in namespace %q", attrs.Namespace)
	}
	if reason != "" {
		what += ": " + reason
	}
	return apierrors.NewForbidden(schema.GroupResource{Group: attrs.APIGroup, Resource: attrs.Resource}, attrs.Name,
		fmt.Errorf("%s: %s", q.Path(), what))
}

// attributes describes the operation as the list (or, for a watch
// channel, the watch) kube-apiserver would authorize: verb list or watch, with the name when the field selector names one
// object (as kube-apiserver's request info does, so that RBAC
// resourceNames apply), and with both selectors.
func (q *Query) attributes(u user.Info) authorizer.AttributesRecord {
	verb := "list"
	if q.watch {
		verb = "watch"
	}
	a := authorizer.AttributesRecord{
		User:            u,
		Verb:            verb,
		Namespace:       q.namespace,
		APIGroup:        q.resource.Group,
		APIVersion:      q.resource.Version,
		Resource:        q.resource.Resource,
		Name:            q.name,
		ResourceRequest: true,
	}
	a.FieldSelectorRequirements = q.fieldRequirements
	if q.labels != nil {
		a.LabelSelectorRequirements, _ = q.labels.Requirements()
	}
	return a
}
