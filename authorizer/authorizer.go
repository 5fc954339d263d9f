package authorizer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/graph"
)

// Reachability answers whether a node reaches an object. *graph.Graph is
// one.
type Reachability interface {
	Reachable(node string, ref graph.ObjectRef) bool
}

// NodeAuthorizer decides the requests of node identities.
type NodeAuthorizer struct {
	graph Reachability
	// refresher, when set, is asked to bring the graph up to date
	// before a refusal a lagging graph could have caused (refresh.go).
	refresher Refresher
}

var (
	_ authorizer.Authorizer   = (*NodeAuthorizer)(nil)
	_ authorizer.RuleResolver = (*NodeAuthorizer)(nil)
)

// New returns an authorizer that decides against g.
func New(g Reachability) *NodeAuthorizer {
	return &NodeAuthorizer{graph: g}
}

// NewRefreshing returns an authorizer that decides against g and, before
// refusing a node an object one of its pods could reference, has r
// bring g up to date with that node's pods and decides again.
func NewRefreshing(g Reachability, r Refresher) *NodeAuthorizer {
	return &NodeAuthorizer{graph: g, refresher: r}
}

// errRulesUnsupported is what RulesFor says of node identities: their
// rights depend on the graph, not on rules a client could list.
var errRulesUnsupported = errors.New("node authorizer does not support user rule resolution")

// RulesFor answers SelfSubjectRulesReview: incomplete for nodes, nothing
// (and complete) for everyone else, as the reference does.
func (a *NodeAuthorizer) RulesFor(_ context.Context, u user.Info, _ string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	if _, isNode := nodeIdentity(u); isNode {
		return nil, nil, true, errRulesUnsupported
	}
	return nil, nil, false, nil
}

// Authorize decides a request. Only node identities get an opinion.
func (a *NodeAuthorizer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	node, isNode := nodeIdentity(attrs.GetUser())
	if !isNode {
		return authorizer.DecisionNoOpinion, "", nil
	}
	if node == "" {
		klog.V(2).InfoS("Node request refused: no node name", "user", attrs.GetUser().GetName())
		return authorizer.DecisionNoOpinion, fmt.Sprintf("unknown node for user %q", attrs.GetUser().GetName()), nil
	}
	d, reason := a.decide(node, attrs)
	if d != authorizer.DecisionAllow && a.refresher != nil && refreshable[reason] {
		d, reason = a.decideRefreshed(ctx, node, attrs, reason)
	}
	if d != authorizer.DecisionAllow && klog.V(2).Enabled() {
		klog.V(2).InfoS("Node request refused", "node", node, "verb", attrs.GetVerb(), "resource", attrs.GetResource(),
			"subresource", attrs.GetSubresource(), "namespace", attrs.GetNamespace(), "name", attrs.GetName(), "reason", reason)
	}
	return d, reason, nil
}

const (
	allow     = authorizer.DecisionAllow
	noOpinion = authorizer.DecisionNoOpinion
)

// request holds what a decision reads of the attributes, read once: each
// getter is a call through an interface, and the rules below consult most
// of them several times.
type request struct {
	verb, group, resource, subresource, namespace, name string
	attrs                                               authorizer.Attributes
}

func (a *NodeAuthorizer) decide(node string, attrs authorizer.Attributes) (authorizer.Decision, string) {
	if !attrs.IsResourceRequest() {
		return noOpinion, "" // the static rules name no URLs
	}
	r := &request{
		verb: attrs.GetVerb(), group: attrs.GetAPIGroup(), resource: attrs.GetResource(),
		subresource: attrs.GetSubresource(), namespace: attrs.GetNamespace(), name: attrs.GetName(), attrs: attrs,
	}
	switch r.group {
	case "":
		switch r.resource {
		case "secrets":
			return a.readNamespaced(node, graph.Secret, r)
		case "configmaps":
			return a.readNamespaced(node, graph.ConfigMap, r)
		case "persistentvolumeclaims":
			if r.subresource == "status" {
				return a.statusUpdate(node, graph.PersistentVolumeClaim, r)
			}
			return a.get(node, graph.PersistentVolumeClaim, r)
		case "persistentvolumes":
			return a.get(node, graph.PersistentVolume, r)
		case "serviceaccounts":
			return a.serviceAccount(node, r)
		case "nodes":
			return nodeObject(node, r)
		case "pods":
			return a.pod(node, r)
		}
	case "resource.k8s.io":
		switch r.resource {
		case "resourceclaims":
			return a.get(node, graph.ResourceClaim, r)
		case "resourceslices":
			return a.resourceSlice(node, r)
		}
	case "storage.k8s.io":
		switch r.resource {
		case "volumeattachments":
			return a.get(node, graph.VolumeAttachment, r)
		case "csinodes":
			return csiNode(node, r)
		}
	case "coordination.k8s.io":
		if r.resource == "leases" {
			return lease(node, r)
		}
	case "certificates.k8s.io":
		if r.resource == "podcertificaterequests" {
			// PodCertificateRequest is off by default in 1.36; the
			// reference then has no opinion, not even from its rules.
			return noOpinion, ""
		}
	}
	return a.static(r)
}

func (a *NodeAuthorizer) static(r *request) (authorizer.Decision, string) {
	if staticRules[ruleKey{r.group, r.resource, r.subresource}]&verbBit(r.verb) != 0 {
		return allow, ""
	}
	return noOpinion, ""
}

// reached is the graph question at the heart of most decisions.
func (a *NodeAuthorizer) reached(node string, kind graph.Kind, r *request) (authorizer.Decision, string) {
	if r.name == "" {
		return noOpinion, "No Object name found"
	}
	if a.graph.Reachable(node, graph.ObjectRef{Kind: kind, Namespace: r.namespace, Name: r.name}) {
		return allow, ""
	}
	return noOpinion, missingRelationship[kind]
}

// missingRelationship says, per kind, which relationship a denied node
// lacks. Constant strings: a denial allocates nothing.
var missingRelationship = [...]string{
	graph.Pod:                   "no relationship found between node and this object: the pod is not bound to this node",
	graph.Secret:                "no relationship found between node and this object: no pod bound to this node references this secret, directly or through a persistent volume",
	graph.ConfigMap:             "no relationship found between node and this object: no pod bound to this node references this configmap",
	graph.ServiceAccount:        "no relationship found between node and this object: no pod bound to this node runs as this service account",
	graph.PersistentVolumeClaim: "no relationship found between node and this object: no pod bound to this node uses this claim",
	graph.PersistentVolume:      "no relationship found between node and this object: the volume is not bound to a claim used by a pod on this node",
	graph.ResourceClaim:         "no relationship found between node and this object: no pod bound to this node uses this resource claim",
	graph.VolumeAttachment:      "no relationship found between node and this object: the attachment is not for this node",
	graph.ResourceSlice:         "no relationship found between node and this object: the resource slice does not belong to this node",
}

// refreshable holds the refusals a graph behind kube-apiserver can cause
// for objects a pod references: the pod itself is missing (just bound),
// or so is its edge to the object. A claim bound to a volume a moment ago
// (a claim update, not a pod's) and the attachments and slices of the
// node are not pod edges; refreshing the node's pods cannot turn them.
var refreshable = map[string]bool{}

func init() {
	for _, k := range []graph.Kind{graph.Pod, graph.Secret, graph.ConfigMap, graph.ServiceAccount,
		graph.PersistentVolumeClaim, graph.PersistentVolume, graph.ResourceClaim} {
		refreshable[missingRelationship[k]] = true
	}
}

// decideRefreshed decides again once the refresher has brought the graph
// up to kube-apiserver's view of the node's pods. If it cannot, the
// refusal stands: never an allow on error.
func (a *NodeAuthorizer) decideRefreshed(ctx context.Context, node string, attrs authorizer.Attributes, reason string) (authorizer.Decision, string) {
	start := time.Now()
	err := a.refresher.Refresh(ctx, node)
	refreshWait.Observe(time.Since(start).Seconds())
	if err != nil {
		refreshedDecisions.WithLabelValues("error").Inc()
		klog.V(2).InfoS("Could not bring the graph up to date before a refusal; refusing", "node", node, "err", err)
		return noOpinion, reason
	}
	d, again := a.decide(node, attrs)
	if d == allow {
		refreshedDecisions.WithLabelValues("allowed").Inc()
		klog.V(2).InfoS("Graph was behind kube-apiserver: allowed once up to date", "node", node,
			"resource", attrs.GetResource(), "namespace", attrs.GetNamespace(), "name", attrs.GetName(),
			"waited", time.Since(start))
	} else {
		refreshedDecisions.WithLabelValues("refused").Inc()
	}
	return d, again
}

func (a *NodeAuthorizer) readNamespaced(node string, kind graph.Kind, r *request) (authorizer.Decision, string) {
	switch r.verb {
	case "get", "list", "watch":
	default:
		return noOpinion, "can only read resources of this type"
	}
	if r.subresource != "" {
		return noOpinion, "cannot read subresource"
	}
	if r.namespace == "" {
		return noOpinion, "can only read namespaced object of this type"
	}
	return a.reached(node, kind, r)
}

func (a *NodeAuthorizer) get(node string, kind graph.Kind, r *request) (authorizer.Decision, string) {
	if r.verb != "get" {
		return noOpinion, "can only get individual resources of this type"
	}
	if r.subresource != "" {
		return noOpinion, "cannot get subresource"
	}
	return a.reached(node, kind, r)
}

func (a *NodeAuthorizer) statusUpdate(node string, kind graph.Kind, r *request) (authorizer.Decision, string) {
	switch r.verb {
	case "update", "patch":
	default:
		return noOpinion, "can only get/update/patch this type"
	}
	if r.subresource != "status" {
		return noOpinion, "can only update status subresource"
	}
	return a.reached(node, kind, r)
}

// serviceAccount: get of an account a pod on the node runs as (kubelet
// credential providers need it), or create of its token subresource.
func (a *NodeAuthorizer) serviceAccount(node string, r *request) (authorizer.Decision, string) {
	if r.verb == "get" && r.subresource == "" {
		return a.readNamespaced(node, graph.ServiceAccount, r)
	}
	if r.verb != "create" || r.name == "" {
		return noOpinion, "can only create tokens for individual service accounts"
	}
	if r.subresource != "token" {
		return noOpinion, "can only create token subresource of serviceaccount"
	}
	return a.reached(node, graph.ServiceAccount, r)
}

// lease: the node's own lease in kube-node-lease. The name is not known at
// create; the NodeRestriction admission plugin checks it then.
func lease(node string, r *request) (authorizer.Decision, string) {
	switch r.verb {
	case "get", "create", "update", "patch", "delete":
	default:
		return noOpinion, "can only get, create, update, patch, or delete a node lease"
	}
	if r.namespace != "kube-node-lease" {
		return noOpinion, `can only access leases in the "kube-node-lease" system namespace`
	}
	if r.verb != "create" && r.name != node {
		return noOpinion, "can only access node lease with the same name as the requesting node"
	}
	return allow, ""
}

// csiNode: the node's own CSINode object, as for leases.
func csiNode(node string, r *request) (authorizer.Decision, string) {
	switch r.verb {
	case "get", "create", "update", "patch", "delete":
	default:
		return noOpinion, "can only get, create, update, patch, or delete a CSINode"
	}
	if r.subresource != "" {
		return noOpinion, "cannot authorize CSINode subresources"
	}
	if r.verb != "create" && r.name != node {
		return noOpinion, "can only access CSINode with the same name as the requesting node"
	}
	return allow, ""
}

func (a *NodeAuthorizer) resourceSlice(node string, r *request) (authorizer.Decision, string) {
	if r.subresource != "" {
		return noOpinion, "cannot authorize ResourceSlice subresources"
	}
	switch r.verb {
	case "create":
		// The new object's spec.nodeName is checked by NodeRestriction.
		return allow, ""
	case "get", "update", "patch", "delete":
		return a.reached(node, graph.ResourceSlice, r)
	case "watch", "list", "deletecollection":
		if selectsNode(r, node) {
			return allow, ""
		}
		return noOpinion, "can only list/watch/deletecollection resourceslices with nodeName field selector"
	}
	return noOpinion, "only the following verbs are allowed for a ResourceSlice: get, watch, list, create, update, patch, delete, deletecollection"
}

// nodeObject: a node may create and update Node objects (NodeRestriction
// limits it to its own), and read only its own, by name, even before it
// exists.
func nodeObject(node string, r *request) (authorizer.Decision, string) {
	switch r.subresource {
	case "":
		switch r.verb {
		case "create", "update", "patch":
			return allow, ""
		case "get", "list", "watch":
			switch r.name {
			case node:
				return allow, ""
			case "":
				return noOpinion, "node cannot read all nodes, only its own Node object"
			default:
				return noOpinion, "node cannot read another node's Node object, only its own"
			}
		}
	case "status":
		switch r.verb {
		case "update", "patch":
			return allow, ""
		}
	}
	return noOpinion, ""
}

func (a *NodeAuthorizer) pod(node string, r *request) (authorizer.Decision, string) {
	switch r.subresource {
	case "":
		switch r.verb {
		case "get":
			return a.get(node, graph.Pod, r)
		case "list", "watch":
			if selectsNode(r, node) {
				return allow, ""
			}
			if r.name != "" {
				return a.reached(node, graph.Pod, r)
			}
			return noOpinion, "can only list/watch pods with spec.nodeName field selector"
		case "create", "delete":
			// Mirror pods; NodeRestriction keeps them to this node.
			return allow, ""
		}
	case "status":
		switch r.verb {
		case "update", "patch":
			return allow, ""
		}
	case "eviction":
		if r.verb == "create" {
			return allow, ""
		}
	}
	return noOpinion, ""
}

// selectsNode reports whether the request's field selector requires
// spec.nodeName=<node> (kube-apiserver parses "==" to the same
// requirement). Requirements that failed to parse are not there to
// match, so a malformed selector grants nothing.
func selectsNode(r *request, node string) bool {
	reqs, _ := r.attrs.GetFieldSelector()
	for _, r := range reqs {
		if r.Field == "spec.nodeName" && r.Operator == selection.Equals && r.Value == node {
			return true
		}
	}
	return false
}
