package authorizer

// Owners says, for a node, whether this replica's graph is complete for
// it, and if not, which replicas' graphs are: the membership table of a
// sharded hub (package shard; docs/architecture.md, "Sharding"). A
// replica that holds every node (unsharded) needs none: a Webhook
// without Shards decides everything locally.
type Owners interface {
	// Holders reports whether this replica holds node: it owns the
	// node's range or holds it warm as the secondary, so its graph has
	// every pod of node. When it does not, owner and secondary are the
	// base URLs (https://host:port) of the replicas that do, owner first;
	// either is "" when there is none (one replica left, or none known).
	Holders(node string) (held bool, owner, secondary string)
}

// ForwardedHeader marks a SubjectAccessReview one replica forwarded to
// another, with the forwarder's name as its value (for the receiver's
// logs). A review that carries it is decided where it arrives and never
// forwarded again: one hop, so two replicas whose tables disagree for a
// moment (one sees a member the other does not yet) cannot pass a review
// back and forth until kube-apiserver's webhook timeout. Any caller of
// the webhook may set it; it can only make the receiver decide itself,
// which is never a wrong answer, only a costlier one.
const ForwardedHeader = "X-Nodeproxy-Forwarded-By"
