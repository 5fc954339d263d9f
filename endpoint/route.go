package endpoint

import (
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
)

// route is a read the hub can answer: one bulk get operation (get, list)
// or one channel (watch).
type route struct {
	verb string // get, list or watch
	// name is the object a get names; the operation selects it by field.
	name string
	// timeout is a watch's timeoutSeconds, which the endpoint keeps
	// itself: the hub's channels do not time out.
	timeout *int64
	op      v1alpha1.GetOperation
}

// requestInfo parses paths the way kube-apiserver does, so that the
// endpoint and kube-apiserver never disagree about what a request is.
var requestInfo = &apirequest.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// hubRoute returns the read the hub answers for req, or false: everything
// else goes to kube-apiserver unchanged. The hub answers exactly what the
// kubelet's informers read:
//
//   - secrets and configmaps of one namespace: get, list, watch (the
//     kubelet's watch-based manager: one reflector per object, selected
//     by metadata.name);
//   - pods, list and watch selected by spec.nodeName=<this node> (the
//     kubelet's API pod source);
//   - nodes, list and watch selected by metadata.name=<this node> (its
//     node informer).
//
// A get of the Node stays with kube-apiserver: the kubelet sends one only
// to retry a node status update that conflicted (its first attempt reads
// its node informer, which the hub serves), and that retry wants
// kube-apiserver's latest state. Anything else a node may not list through
// the hub (pods of another node, every secret) goes to kube-apiserver too,
// which refuses it as it always has.
//
// info is req as requestInfo parsed it, nil if it could not.
func hubRoute(req *http.Request, info *apirequest.RequestInfo, node string) (route, bool) {
	if req.Method != http.MethodGet || info == nil {
		return route{}, false
	}
	if !info.IsResourceRequest || info.APIGroup != "" || info.APIVersion != "v1" || info.Subresource != "" {
		return route{}, false
	}
	var opts metav1.ListOptions
	if err := parameterCodec.DecodeParameters(req.URL.Query(), coreV1, &opts); err != nil {
		return route{}, false // kube-apiserver words the 400
	}
	r := route{verb: info.Verb, name: info.Name}
	switch info.Verb {
	case "get", "list", "watch":
	default:
		return route{}, false
	}
	switch info.Resource {
	case "secrets", "configmaps":
		if info.Namespace == "" {
			return route{}, false
		}
	case "pods":
		if info.Verb == "get" || !selects(opts.FieldSelector, "spec.nodeName", node) {
			return route{}, false
		}
	case "nodes":
		if info.Verb == "get" || !selects(opts.FieldSelector, "metadata.name", node) {
			return route{}, false
		}
	default:
		return route{}, false
	}
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
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: info.Resource},
		Namespace: info.Namespace,
		Options:   opts,
	}
	return r, true
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
