package nodecopy

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// The view carries the services of the namespaces where the node has a
// pod, and of default (docs/api.md, "The node view"): a namespace's
// services enter with its first pod and leave, LEFT, after its last,
// which is no deletion of them. What the copy holds of services is that
// set, and it keeps to it when the node is served services by another
// way (observe.go): the kubelet's list of every service, from
// kube-apiserver while the hub is away, would otherwise bring the
// cluster's every service into the copy, and keep them there, since the
// view never takes out what it never sent.

var servicesIndex = v1alpha1.NodeViewTypeIndex("services")

// namespaces is the set of namespaces of the copy's pods, made once per
// observation, when its first service asks.
type namespaces map[string]bool

// unviewedLocked reports whether the state o, of type i, is one the view
// would not send the node although the node may read it: a service of a
// namespace where the copy holds no pod, other than default. Taken in,
// it would stay after the view moved on, and no change of it would
// follow. A deletion is never passed over: it is a floor for the name,
// whatever the namespace.
func (c *Copy) unviewedLocked(i int, o *Object, in *namespaces) bool {
	if i != servicesIndex || o.Namespace == metav1.NamespaceDefault {
		return false
	}
	if *in == nil {
		*in = namespaces{}
		for k := range c.objects[podsIndex] {
			(*in)[k.namespace] = true
		}
	}
	return !(*in)[o.Namespace]
}

var podsIndex = v1alpha1.NodeViewTypeIndex("pods")
