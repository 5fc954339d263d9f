// Package authorizer decides requests from node identities against the
// reachability of package graph, with the answers of kube-apiserver's
// in-tree Node authorizer (Kubernetes 1.36, default feature gates,
// AuthorizeNodeWithSelectors on), and serves them as a SubjectAccessReview
// webhook.
//
// A node identity is user system:node:<name> in group system:nodes.
// Everyone else gets NoOpinion, so the authorizers after this one (RBAC)
// decide. A node's request is decided by kind:
//
//	secrets, configmaps        get/list/watch of a named object the node reaches
//	persistentvolumeclaims     get of a reached claim; update/patch of its status
//	persistentvolumes          get of a reached volume
//	serviceaccounts            get of a reached account; create of its token
//	resourceclaims             get of a reached claim
//	volumeattachments          get of an attachment for this node
//	resourceslices             create; get/update/patch/delete of this node's;
//	                           list/watch/deletecollection with spec.nodeName=<self>
//	leases                     this node's lease in kube-node-lease
//	csinodes                   this node's CSINode
//	nodes                      create/update/patch; read of its own Node; status
//	pods                       get of a pod on this node; list/watch with
//	                           spec.nodeName=<self>; create/delete (mirror pods);
//	                           status; eviction
//	podcertificaterequests     no opinion (the feature is off by default in 1.36)
//	anything else              the static rules of the system:node ClusterRole
//
// A refusal is NoOpinion, never Deny, exactly as the reference: a cluster
// may still grant more through RBAC. A refusal that a graph lagging behind
// kube-apiserver could have caused (a pod, or what a pod references) is
// decided again once a Refresher has brought the graph up to
// kube-apiserver's view of that node's pods (refresh.go); allows never
// wait. Every decision is made without
// allocating and without a graph walk: the graph answers "does this node
// reach this object" with one lookup.
//
// A replica that holds a share of the nodes (a Webhook with Shards,
// shards.go) decides locally for its own nodes and for every answer the
// node's pods do not decide; for the rest it forwards the review, one hop,
// to the replica that owns the node, then to the one that holds it warm
// (forward.go), and with both failing decides from kube-apiserver's
// consistent list of the node's pods by the same rules (consistent.go).
// Never an allow on error there either.
package authorizer
