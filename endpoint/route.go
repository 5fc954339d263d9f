package endpoint

import (
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// route is a read the hub can answer: one bulk get operation (get, list)
// or one channel (watch).
type route struct {
	who  caller
	verb string // get, list or watch
	// name is the object a get names; the operation selects it by field.
	name string
	// timeout is a watch's timeoutSeconds, which the endpoint keeps
	// itself: the hub's channels do not time out.
	timeout *int64
	op      v1alpha1.GetOperation
	// toCopy is the read of the node's view the copy answers when it
	// can (nil if none): what the hub answers it the copy takes in
	// (observe.go), and a watch of it through the hub ends when the copy
	// catches up.
	toCopy *copyRead
}

// requestInfo parses paths the way kube-apiserver does, so that the
// endpoint and kube-apiserver never disagree about what a request is.
var requestInfo = &apirequest.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// groupVersion is the API group and version of what r reads.
func (r route) groupVersion() schema.GroupVersion {
	return schema.GroupVersion{Group: r.op.Resource.Group, Version: r.op.Resource.Version}
}

// caller is who sent a request: the kubelet (the node's own certificate)
// or another client of the node with its own credential (kube-proxy's
// ServiceAccount token), which the endpoint never lends the node's.
type caller int

const (
	kubelet caller = iota
	client
)

// clusterWide are the types nodes read whole, whatever their pods: the
// kubelet's Services (for pods' environment variables), RuntimeClasses
// and CSIDrivers, and kube-proxy's Services, EndpointSlices and
// ServiceCIDRs (docs/architecture.md, "What a node watches on
// kube-apiserver"). The hub serves any list or watch of them, with its
// selectors, and words a selector it cannot evaluate exactly as a refusal
// of the request's form, which sends the request to kube-apiserver.
var clusterWide = map[schema.GroupVersionResource]bool{
	{Version: "v1", Resource: "services"}:                                  true,
	{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}: true,
	{Group: "networking.k8s.io", Version: "v1", Resource: "servicecidrs"}:  true,
	{Group: "node.k8s.io", Version: "v1", Resource: "runtimeclasses"}:      true,
	{Group: "storage.k8s.io", Version: "v1", Resource: "csidrivers"}:       true,
}

// hubRoute returns the read the hub answers for req from who, or false:
// everything else goes to kube-apiserver unchanged. For the kubelet the
// hub answers exactly what its informers read:
//
//   - secrets and configmaps of one namespace: get, list, watch (the
//     kubelet's watch-based manager: one reflector per object, selected
//     by metadata.name);
//   - pods, list and watch selected by spec.nodeName=<this node> (the
//     kubelet's API pod source);
//   - nodes, list and watch selected by metadata.name=<this node> (its
//     node informer);
//   - the clusterWide types: list, watch.
//
// A get of the Node stays with kube-apiserver: the kubelet sends one only
// to retry a node status update that conflicted (its first attempt reads
// its node informer, which the hub serves), and that retry wants
// kube-apiserver's latest state. Anything else a node may not list through
// the hub (pods of another node, every secret) goes to kube-apiserver too,
// which refuses it as it always has.
//
// For another client of the node the hub answers lists and watches of the
// clusterWide types and of nodes (kube-proxy watches its own), as that
// client: the hub asks
// kube-apiserver whether the client may, as kube-apiserver would decide.
//
// info is req as requestInfo parsed it, nil if it could not.
func hubRoute(req *http.Request, info *apirequest.RequestInfo, node string, who caller) (route, bool) {
	if req.Method != http.MethodGet || info == nil {
		return route{}, false
	}
	if !info.IsResourceRequest || info.Subresource != "" {
		return route{}, false
	}
	switch info.Verb {
	case "get", "list", "watch":
	default:
		return route{}, false
	}
	gvr := schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource}
	var opts metav1.ListOptions
	if err := parameterCodec.DecodeParameters(req.URL.Query(), coreV1, &opts); err != nil {
		return route{}, false // kube-apiserver words the 400
	}
	if clusterWide[gvr] || who == client {
		// A get is authorized as get by kube-apiserver and as list by the
		// hub for anyone but a node (bulk get), which RBAC may answer
		// differently: gets of these, which no node client sends on a
		// steady basis, stay with kube-apiserver.
		if info.Verb == "get" || !clusterWide[gvr] && gvr != nodesV1 {
			return route{}, false
		}
	} else if !servedToKubelet(gvr, info, opts, node) {
		return route{}, false
	}
	r := route{who: who, verb: info.Verb, name: info.Name}
	// RequestInfo also names the object a metadata.name selector picks;
	// only a name in the path (get secrets/x, and the deprecated
	// watch/.../secrets/x) needs turning into the hub's field selector.
	if len(info.Parts) > 1 {
		if opts.FieldSelector != "" {
			return route{}, false
		}
		opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", info.Name).String()
	}
	// The hub takes watch options through the channel, not the operation.
	opts.Watch = false
	r.timeout, opts.TimeoutSeconds = opts.TimeoutSeconds, nil
	opts.TypeMeta = metav1.TypeMeta{}
	r.op = v1alpha1.GetOperation{
		Resource:  metav1.GroupVersionResource{Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource},
		Namespace: info.Namespace,
		Options:   opts,
	}
	return r, true
}

var nodesV1 = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// servedToKubelet reports whether the hub answers the kubelet's read of
// gvr, a type outside clusterWide.
func servedToKubelet(gvr schema.GroupVersionResource, info *apirequest.RequestInfo, opts metav1.ListOptions, node string) bool {
	if gvr.Group != "" || gvr.Version != "v1" {
		return false
	}
	switch gvr.Resource {
	case "secrets", "configmaps":
		return info.Namespace != ""
	case "pods":
		return info.Verb != "get" && selects(opts.FieldSelector, "spec.nodeName", node)
	case "nodes":
		return info.Verb != "get" && selects(opts.FieldSelector, "metadata.name", node)
	}
	return false
}

// selects reports whether the field selector sel is exactly field=value.
func selects(sel, field, value string) bool {
	s, err := fields.ParseSelector(sel)
	if err != nil {
		return false
	}
	reqs := s.Requirements()
	return len(reqs) == 1 && reqs[0].Field == field && reqs[0].Value == value &&
		(reqs[0].Operator == selection.Equals || reqs[0].Operator == selection.DoubleEquals)
}
