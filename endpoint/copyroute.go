package endpoint

import (
	"net/http"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/nodecopy"
)

// copyRead is a read of the kubelet that the copy of the node's view may
// answer. Passed by pointer: a watch of the copy holds it for its life,
// and what its goroutine's stack holds while it waits decides whether
// the stack can shrink (docs/benchmarks.md, "The node endpoint's
// footprint").
type copyRead struct {
	typ    int // index in v1alpha1.NodeViewTypes
	verb   string
	filter nodecopy.Filter
	opts   metav1.ListOptions
	// partial: the copy may lack an object that exists and that the
	// node may read: of a type the graph decides (secrets, configmaps,
	// service accounts, claims, volumes: a reference created after its
	// pod), or a get of a pod or of the Node (a pod bound a moment ago,
	// a Node not registered yet). Not the copy's to deny while the hub
	// or kube-apiserver can answer.
	partial bool
	// onlyOffline: a get of a cluster-wide type, which RBAC decides, not
	// the graph (see hubRoute): kube-apiserver's to answer while it can.
	onlyOffline bool
}

func (r *copyRead) viewType() v1alpha1.NodeViewType { return v1alpha1.NodeViewTypes[r.typ] }

func (r *copyRead) groupVersion() schema.GroupVersion {
	t := r.viewType()
	return schema.GroupVersion{Group: t.Group, Version: t.Version}
}

// copyRoute returns the read of req the copy may answer, or false: what
// the copy holds is the node's view, and it answers a read only when
// the view holds the whole answer:
//
//   - secrets, configmaps, service accounts, claims, volumes: one object
//     by name (a get, or a list or watch selected by metadata.name), as
//     the kubelet reads them; a node may not list them;
//   - pods: list and watch with spec.nodeName=<node>; get by name;
//   - the node's Node: list and watch with metadata.name=<node>; get;
//   - the node's CSINode: get;
//   - services, runtime classes, CSI drivers: list and watch with
//     selectors of labels, metadata.name and metadata.namespace; get.
//
// Anything else is not the copy's: it goes where it goes without one.
func copyRoute(req *http.Request, info *apirequest.RequestInfo, node string) (*copyRead, bool) {
	if req.Method != http.MethodGet || info == nil || !info.IsResourceRequest || info.Subresource != "" {
		return nil, false
	}
	switch info.Verb {
	case "get", "list", "watch":
	default:
		return nil, false
	}
	i := nodecopy.TypeIndex(info.APIGroup, info.Resource)
	if i < 0 || v1alpha1.NodeViewTypes[i].Version != info.APIVersion {
		return nil, false
	}
	var opts metav1.ListOptions
	if err := parameterCodec.DecodeParameters(req.URL.Query(), coreV1, &opts); err != nil {
		return nil, false
	}
	r := &copyRead{typ: i, verb: info.Verb, opts: opts}
	r.filter.Namespace = info.Namespace
	if r.viewType().Namespaced != (info.Namespace != "") && info.Verb == "get" {
		return nil, false
	}
	if !filterOf(&r.filter, opts, r.viewType().Resource) {
		return nil, false
	}
	if len(info.Parts) > 1 {
		if r.filter.Name != "" && r.filter.Name != info.Name {
			return nil, false
		}
		r.filter.Name = info.Name
	}
	switch r.viewType().Resource {
	case "secrets", "configmaps", "serviceaccounts", "persistentvolumeclaims", "persistentvolumes":
		r.partial = true
		if r.filter.Name == "" || r.filter.Labels != nil || r.viewType().Namespaced && r.filter.Namespace == "" {
			return nil, false
		}
	case "pods":
		if info.Verb == "get" {
			r.partial = true
		} else if !selects(opts.FieldSelector, "spec.nodeName", node) || r.filter.Labels != nil {
			return nil, false
		}
	case "nodes":
		if r.filter.Name != node || r.filter.Labels != nil {
			return nil, false
		}
		r.partial = info.Verb == "get"
	case "csinodes":
		// Its kubelet gets it at start; nothing lists or watches it.
		if info.Verb != "get" || r.filter.Name != node {
			return nil, false
		}
		r.partial = true
	default: // the cluster-wide types
		r.onlyOffline = info.Verb == "get"
	}
	return r, true
}

// filterOf fills f from opts' selectors; false if the copy cannot
// evaluate one exactly as kube-apiserver would.
func filterOf(f *nodecopy.Filter, opts metav1.ListOptions, resource string) bool {
	if opts.LabelSelector != "" {
		sel, err := labels.Parse(opts.LabelSelector)
		if err != nil {
			return false // kube-apiserver words the 400
		}
		if !sel.Empty() {
			f.Labels = sel
		}
	}
	if opts.FieldSelector == "" {
		return true
	}
	sel, err := fields.ParseSelector(opts.FieldSelector)
	if err != nil {
		return false
	}
	for _, req := range sel.Requirements() {
		if !slices.Contains(nodecopy.SelectableFields(resource), req.Field) {
			return false
		}
		equals := req.Operator == selection.Equals || req.Operator == selection.DoubleEquals
		if !equals && req.Operator != selection.NotEquals {
			return false
		}
		// A name or namespace it equals is where the copy looks.
		var to *string
		switch {
		case equals && req.Field == "metadata.name":
			to = &f.Name
		case equals && req.Field == "metadata.namespace":
			to = &f.Namespace
		default:
			continue
		}
		if *to != "" && *to != req.Value || req.Value == "" {
			return false
		}
		*to = req.Value
	}
	if !sel.Empty() {
		f.Fields = sel
	}
	return true
}
