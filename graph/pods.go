package graph

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// AddPod records pod and everything it references as reachable from its
// node, replacing what an earlier pod of the same namespace and name
// granted. A pod without spec.nodeName grants nothing and is ignored; a
// mirror pod (annotation kubernetes.io/config.mirror) grants only itself,
// since the kubelet made it from a static manifest and its references are
// not the API's to vouch for.
func (g *Graph) AddPod(pod *corev1.Pod) {
	if pod.Spec.NodeName == "" {
		return
	}
	defer observeWrite("AddPod")()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.addPodLocked(pod)
	g.flushLocked()
}

// UpdatePod applies an informer update. It rebuilds the pod's references
// only when something that decides them can have changed: the node, the
// UID (a new pod under the same name), new ephemeral containers, or the
// resource claim statuses. The rest of a pod's spec is immutable. These are
// the reference's conditions, kept identical so decisions are too.
func (g *Graph) UpdatePod(old, pod *corev1.Pod) {
	if pod.Spec.NodeName == "" {
		return
	}
	if old != nil && old.Spec.NodeName == pod.Spec.NodeName && old.UID == pod.UID &&
		len(pod.Spec.EphemeralContainers) <= len(old.Spec.EphemeralContainers) &&
		claimStatusesEqual(old.Status.ResourceClaimStatuses, pod.Status.ResourceClaimStatuses) {
		return
	}
	g.AddPod(pod)
}

// DeletePod removes the pod of that namespace and name and what it
// granted.
func (g *Graph) DeletePod(namespace, name string) {
	defer observeWrite("DeletePod")()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.removePodLocked(ObjectRef{Kind: Pod, Namespace: namespace, Name: name})
	g.flushLocked()
}

func (g *Graph) addPodLocked(pod *corev1.Pod) {
	self := ObjectRef{Kind: Pod, Namespace: pod.Namespace, Name: pod.Name}
	g.removePodLocked(self)

	node := g.nodeIDLocked(pod.Spec.NodeName)
	rec := &podRecord{node: node, self: g.acquireLocked(self)}
	g.addPathsLocked(rec.self, node, 1)
	g.pods[rec.self] = rec
	uses := g.scratch[:0]
	PodUses(pod, func(ref ObjectRef) {
		for _, e := range uses {
			if e.kind == ref.Kind && e.name == ref.Name && e.ns == ref.Namespace {
				return // one path per pod, however often it names the object
			}
		}
		e := g.acquireLocked(ref)
		uses = append(uses, e)
		g.addPathsLocked(e, node, 1)
	})
	// An exact-size copy: 100k pods' worth of append slack is megabytes.
	rec.uses = slices.Clone(uses)
	clear(uses)
	g.scratch = uses[:0]
}

func (g *Graph) removePodLocked(ref ObjectRef) {
	self := g.objects.get(ref)
	rec, ok := g.pods[self]
	if !ok {
		return
	}
	delete(g.pods, self)
	for _, e := range rec.uses {
		g.addPathsLocked(e, rec.node, -1)
		g.releaseLocked(e)
	}
	g.addPathsLocked(rec.self, rec.node, -1)
	g.releaseLocked(rec.self)
}

func claimStatusesEqual(a, b []corev1.PodResourceClaimStatus) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name {
			return false
		}
		x, y := a[i].ResourceClaimName, b[i].ResourceClaimName
		if (x == nil) != (y == nil) || (x != nil && *x != *y) {
			return false
		}
	}
	return true
}
