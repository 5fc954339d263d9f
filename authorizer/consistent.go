package authorizer

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/graph"
)

// Deciding for a node from kube-apiserver rather than from the graph.
//
// A sharded replica's graph has the pods of the nodes it holds only. For
// another node, when neither replica that holds it answers, it decides
// from what kube-apiserver has now: the node's pods, listed with a
// consistent read (resourceVersion "", so nothing the node has been
// shown is missing from it), whole, since the references are in their
// specs. What the pods lead to, the graph's own rules say (graph.PodUses);
// what claims lead to (bound PVs and their secrets), the replica's own
// graph says (graph.ClaimVolumes), since every replica keeps every PV.
// Volume attachments and resource slices are the node's own objects,
// which a replica keeps only for the nodes it holds: the one asked about
// is read from kube-apiserver by name.
//
// Every error is a refusal with the error beside it: never an allow on
// error. Lists are bounded in number at once; one past the bound is an
// error too, so that a replica whose peers are down cannot turn
// kube-apiserver's reviews into an unbounded stream of lists.

// NodeSource reads, with consistent reads, what a decision about a node
// the replica does not hold needs from kube-apiserver.
type NodeSource interface {
	// NodePods lists the pods bound to node (spec.nodeName), whole.
	NodePods(ctx context.Context, node string) ([]*corev1.Pod, error)
	// AttachmentNode is the spec.nodeName of VolumeAttachment name, ""
	// if it does not exist.
	AttachmentNode(ctx context.Context, name string) (string, error)
	// SliceNode is the spec.nodeName of ResourceSlice name, "" if it
	// does not exist or belongs to no node.
	SliceNode(ctx context.Context, name string) (string, error)
}

// ClaimVolumes says which PVs are bound to a claim and which secrets
// they show the kubelet. *graph.Graph is one.
type ClaimVolumes interface {
	ClaimVolumes(claim graph.ObjectRef) (pvs, secrets []graph.ObjectRef)
}

// DefaultConsistentTimeout bounds one consistent decision: a list of
// one node's pods takes kube-apiserver up to a few hundred milliseconds
// on a quiet type (its watch cache waits for etcd's progress
// notification), and the bound leaves room within the webhook's 3 s
// after two peers have failed (DefaultPeerTimeout).
const DefaultConsistentTimeout = time.Second

// DefaultConsistentMaxConcurrent bounds the consistent decisions in
// flight on a replica: as many as the refresher's lists (16,
// DefaultRefreshOptions), which this path resembles: several nodes'
// reviews at once while their replicas fail over.
const DefaultConsistentMaxConcurrent = 16

var errTooManyConsistent = errors.New("too many consistent decisions in flight")

// Consistent decides for nodes this replica does not hold, from
// kube-apiserver's consistent reads.
type Consistent struct {
	source  NodeSource
	volumes ClaimVolumes
	timeout time.Duration
	slots   chan struct{}
}

// NewConsistent returns a decider that reads from source and follows
// claims with volumes (the replica's graph). timeout and maxConcurrent
// take their defaults when not positive.
func NewConsistent(source NodeSource, volumes ClaimVolumes, timeout time.Duration, maxConcurrent int) *Consistent {
	if timeout <= 0 {
		timeout = DefaultConsistentTimeout
	}
	if maxConcurrent <= 0 {
		maxConcurrent = DefaultConsistentMaxConcurrent
	}
	return &Consistent{source: source, volumes: volumes, timeout: timeout, slots: make(chan struct{}, maxConcurrent)}
}

// Decide decides a node's request whose answer depends on the node's
// pods or its own objects (kind is what the request is about), as
// NodeAuthorizer would with a graph complete for node.
func (c *Consistent) Decide(ctx context.Context, node string, kind graph.Kind, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		consistentDecisions.WithLabelValues("throttled").Inc()
		return noOpinion, "", fmt.Errorf("decide for node %q from kube-apiserver: %w", node, errTooManyConsistent)
	}
	reach, err := c.reach(ctx, node, kind, attrs)
	<-c.slots
	if err != nil {
		consistentDecisions.WithLabelValues("error").Inc()
		klog.V(2).InfoS("Could not read a node's pods from kube-apiserver; no opinion", "node", node, "err", err)
		return noOpinion, "", fmt.Errorf("decide for node %q from kube-apiserver: %w", node, err)
	}
	d, reason := (&NodeAuthorizer{graph: reach}).decide(node, attrs)
	if d == allow {
		consistentDecisions.WithLabelValues("allowed").Inc()
	} else {
		consistentDecisions.WithLabelValues("refused").Inc()
	}
	return d, reason, nil
}

// reach reads what node reaches of kind from kube-apiserver.
func (c *Consistent) reach(ctx context.Context, node string, kind graph.Kind, attrs authorizer.Attributes) (*listedReach, error) {
	r := &listedReach{node: node, refs: map[graph.ObjectRef]struct{}{}}
	var owner string
	var err error
	switch kind {
	case graph.VolumeAttachment:
		owner, err = c.source.AttachmentNode(ctx, attrs.GetName())
	case graph.ResourceSlice:
		owner, err = c.source.SliceNode(ctx, attrs.GetName())
	default:
		return r, c.podsReach(ctx, r)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s %q: %w", kind, attrs.GetName(), err)
	}
	if owner == node {
		r.add(graph.ObjectRef{Kind: kind, Name: attrs.GetName()})
	}
	return r, nil
}

// podsReach adds what the node's pods reach, as the graph would.
func (c *Consistent) podsReach(ctx context.Context, r *listedReach) error {
	pods, err := c.source.NodePods(ctx, r.node)
	if err != nil {
		return fmt.Errorf("list the pods of node %q: %w", r.node, err)
	}
	for _, pod := range pods {
		if pod.Spec.NodeName != r.node {
			continue // the list selected by it; a source that did not is not trusted
		}
		r.add(graph.ObjectRef{Kind: graph.Pod, Namespace: pod.Namespace, Name: pod.Name})
		graph.PodUses(pod, func(ref graph.ObjectRef) {
			if _, seen := r.refs[ref]; seen {
				return
			}
			r.add(ref)
			if ref.Kind == graph.PersistentVolumeClaim {
				pvs, secrets := c.volumes.ClaimVolumes(ref)
				for _, v := range pvs {
					r.add(v)
				}
				for _, s := range secrets {
					r.add(s)
				}
			}
		})
	}
	return nil
}

// listedReach is what one node reaches, read for one decision: a
// throwaway stand-in for the graph, with the graph's answers for that
// node.
type listedReach struct {
	node string
	refs map[graph.ObjectRef]struct{}
}

func (r *listedReach) add(ref graph.ObjectRef) { r.refs[ref] = struct{}{} }

// Reachable implements Reachability for the one node it was read for.
func (r *listedReach) Reachable(node string, ref graph.ObjectRef) bool {
	if node != r.node {
		return false
	}
	_, ok := r.refs[ref]
	return ok
}
