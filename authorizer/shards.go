package authorizer

import (
	"context"
	"errors"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/graph"
)

// Answering for every node when each replica holds a share of them
// (docs/architecture.md, "Sharding").
//
// kube-apiserver's webhook is one URL behind the hub's Service, so any
// replica gets a review about any node, but a replica's graph has only
// the pods of the nodes it holds (owned or warm). For another node it
// would refuse what the node may read. So, for a node it does not hold,
// and only when the answer depends on the node's pods or its own objects
// (a lease, a Node's status or a static rule is the same everywhere):
//
//	not forwarded:  the owner  --fails-->  the secondary  --fails-->  consistent list
//	forwarded:                                                        consistent list
//
// A peer's answer is returned as the peer gave it. A peer that fails
// (down, slow, refusing the caller, answering something else) is counted
// and the next is asked; the consistent list (consistent.go) is the last
// resort, and its errors are no opinion, never an allow.

// Shards routes the reviews a replica cannot answer from its own graph.
// Owners is required; without Peers nothing is forwarded, and without
// Consistent a review no peer answered gets no opinion, with an error.
type Shards struct {
	Owners     Owners
	Peers      *Peers
	Consistent *Consistent
}

var errNoConsistent = errors.New("no replica holding the node answered, and this replica does not decide from kube-apiserver")

// Paths a review takes, as the metric names them.
const (
	pathLocal      = "local"
	pathOwner      = "owner"
	pathSecondary  = "secondary"
	pathConsistent = "consistent_list"
)

// routed is the answer to a review that was not decided by the local
// graph: a peer's status as it gave it, or a consistent decision.
type routed struct {
	path   string
	status *authorizationv1.SubjectAccessReviewStatus // a peer's answer
	// a consistent decision, when status is nil
	decision authorizer.Decision
	reason   string
	err      error
}

// route answers a review about a node this replica does not hold; ok is
// false when the local authorizer should decide (not a node, a node held
// here, or an answer that does not depend on the node's pods). body is
// the review as it arrived; forwardedBy is its ForwardedHeader.
func (s *Shards) route(ctx context.Context, forwardedBy string, body []byte, attrs authorizer.Attributes) (routed, bool) {
	node, isNode := nodeIdentity(attrs.GetUser())
	if !isNode || node == "" {
		return routed{}, false
	}
	kind, depends := podDependent(node, attrs)
	if !depends {
		return routed{}, false
	}
	held, owner, secondary := s.Owners.Holders(node)
	if held {
		return routed{}, false
	}
	if forwardedBy == "" && s.Peers != nil {
		for _, p := range [...]struct{ path, base string }{{pathOwner, owner}, {pathSecondary, secondary}} {
			if p.base == "" {
				continue
			}
			status, err := s.Peers.forward(ctx, p.base, body)
			if err == nil {
				return routed{path: p.path, status: status}, true
			}
			peerFailures.WithLabelValues(p.path, peerFailure(err)).Inc()
			klog.V(2).InfoS("A replica holding the node did not answer a forwarded review", "node", node, "peer", p.path, "url", p.base, "err", err)
		}
	} else {
		klog.V(4).InfoS("Forwarded review about a node this replica does not hold; deciding from kube-apiserver", "node", node, "from", forwardedBy)
	}
	if s.Consistent == nil {
		return routed{path: pathConsistent, decision: noOpinion, err: fmt.Errorf("node %q: %w", node, errNoConsistent)}, true
	}
	d, reason, err := s.Consistent.Decide(ctx, node, kind, attrs)
	return routed{path: pathConsistent, decision: d, reason: reason, err: err}, true
}

// podDependent reports whether the answer to a node's request depends on
// what the node's pods reach (or on its own attachments and slices), and
// which kind of object it asks about: whether a graph that reaches
// nothing refuses it for a missing relationship. Every other answer,
// allow or refusal, is the same from any replica's graph.
func podDependent(node string, attrs authorizer.Attributes) (graph.Kind, bool) {
	_, reason := blind.decide(node, attrs)
	kind, ok := relationshipKind[reason]
	return kind, ok
}

// blind decides against a graph that reaches nothing.
var blind = &NodeAuthorizer{graph: reachesNothing{}}

type reachesNothing struct{}

func (reachesNothing) Reachable(string, graph.ObjectRef) bool { return false }

// relationshipKind is missingRelationship backwards.
var relationshipKind = map[string]graph.Kind{}

func init() {
	for k, reason := range missingRelationship {
		if reason != "" {
			relationshipKind[reason] = graph.Kind(k)
		}
	}
}
