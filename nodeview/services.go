package nodeview

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
)

// A view carries the services of the namespaces where its node has a
// pod, and of default: the kubelet reads services only to give its pods'
// containers environment variables, those of the pod's own namespace and
// the kubernetes service of default (docs/api.md, "The node view"). A
// cluster's every service in every view would cost each node's copy
// what the cluster has, however few of them its pods can see.
//
// A namespace is in the view by the paths the view counts to it, one per
// pod of the node in it (namespaceKind), through addPath as every other
// object that enters and leaves: its services enter before its first
// pod, with ENTERED, and leave after its last, with LEFT; Views' index of
// what views reach routes a service's changes to the views whose
// namespace it is in. The view holds no entry per service: what the
// consumer holds of a namespace in the view is every service of it at
// the view's position, which is the cache's snapshot.
//
// No service is withheld on the live graph's word, as what the graph
// decides is: the graph does not decide services (RBAC lets every node
// read every service), so sending one of a namespace the node is leaving
// tells it nothing it may not read.

// namespaceOf is the path a pod adds to its namespace, false for
// default, which is always in the view.
func namespaceOf(o *cache.Object) (graph.ObjectRef, bool) {
	if o == nil || o.Namespace == metav1.NamespaceDefault {
		return graph.ObjectRef{}, false
	}
	return graph.ObjectRef{Kind: namespaceKind, Name: o.Namespace}, true
}

// addNamespacePath adds delta paths from the pod o's namespace to the
// node.
func (v *view) addNamespacePath(o *cache.Object, delta int32, st *state) {
	if ref, ok := namespaceOf(o); ok {
		v.addPath(ref, delta, st)
	}
}

// inNamespace says whether the view holds the services of ns.
func (v *view) inNamespace(ns string) bool {
	return ns == metav1.NamespaceDefault || v.paths(graph.ObjectRef{Kind: namespaceKind, Name: ns}) > 0
}

// namespaces are the namespaces whose services the view holds, in
// order: those of its pods (each adds a path to its namespace while it
// is in the view), and default.
func (v *view) namespaces() []string {
	out := []string{metav1.NamespaceDefault}
	for k := range v.pods {
		if !slices.Contains(out, k.namespace) {
			out = append(out, k.namespace)
		}
	}
	slices.Sort(out)
	return out
}

// namespaceIn sends the services of ns at st as entering the view.
func (v *view) namespaceIn(ns string, st *state) {
	i := typeOfKind[namespaceKind]
	st.snaps[i].Ascend(ns, ns, "", func(o *cache.Object) bool {
		v.emit(v1alpha1.NodeViewEntered, v.encode(st, i, o))
		return !v.dead
	})
}

// namespaceOut sends the services of ns at st as leaving the view: the
// consumer holds every one of them, since the view's services are taken
// in before its pods.
func (v *view) namespaceOut(ns string, st *state) {
	i := typeOfKind[namespaceKind]
	snap := st.snaps[i]
	snap.Ascend(ns, ns, "", func(o *cache.Object) bool {
		v.emit(v1alpha1.NodeViewLeft, identityObject(st.stores[i], graph.ObjectRef{Namespace: ns, Name: o.Name}, snap.RV))
		return !v.dead
	})
}

// applyService sends a service's change if the view holds its namespace.
func (v *view) applyService(i int, e *cache.Event, st *state) {
	if v.inNamespace(e.Object.Namespace) {
		v.emit(e.Type, v.encode(st, i, e.Object))
	}
}

// sendServices sends the services the view holds, as its initial state.
func (v *view) sendServices(i int, st *state) {
	for _, ns := range v.namespaces() {
		st.snaps[i].Ascend(ns, ns, "", func(o *cache.Object) bool {
			v.emit(watch.Added, v.encode(st, i, o))
			return !v.dead
		})
	}
}

// sharedService says whether other views may send the service o too:
// those of default always, which every view holds.
func (v *view) sharedService(o *cache.Object) bool {
	ref, ok := namespaceOf(o)
	return !ok || v.ix.shared(ref)
}
