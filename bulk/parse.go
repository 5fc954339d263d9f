package bulk

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	listvalidation "k8s.io/apimachinery/pkg/apis/meta/internalversion/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/storage"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/cache"
	"github.com/nodeproxy/nodeproxy/graph"
)

// MaxOperations bounds one request. A kubelet at the default 110 pods,
// each referencing a handful of secrets and configmaps, names a few
// hundred objects; 1000 leaves room while keeping one request's work (and
// its authorization checks) bounded. A node that needs more asks for
// everything it reaches with ReachableFromField instead.
const MaxOperations = 1000

// ReachableFromField is the field selector that asks for every object of
// the type a node can reach through the authorization graph, e.g.
// fieldSelector: "bulk.k8s.io/reachableFrom=node-a". Only equality, and
// for a node identity only its own name. For pods it is the pods bound to
// the node. It is not a field of any object, hence the group prefix.
const ReachableFromField = v1alpha1.GroupName + "/reachableFrom"

// graphKinds maps cached types to the graph's kinds for ReachableFromField.
var graphKinds = map[string]graph.Kind{
	"pods":                   graph.Pod,
	"secrets":                graph.Secret,
	"configmaps":             graph.ConfigMap,
	"persistentvolumeclaims": graph.PersistentVolumeClaim,
	"persistentvolumes":      graph.PersistentVolume,
	"serviceaccounts":        graph.ServiceAccount,
}

// parseWatch validates the selector of a bulk watch channel; stores
// looks a cached type up (nil: not cached).
func parseWatch(sel *v1alpha1.GetOperation, stores func(metav1.GroupVersionResource) *cache.Store, uncached Uncached) (*Query, field.ErrorList, error) {
	q := &Query{watch: true}
	errs := q.parse(sel, stores, uncached)
	if q.lookupErr != nil {
		return nil, nil, q.lookupErr
	}
	if q.refusal != "" {
		// A channel is one watch: kube-apiserver's very words.
		return nil, nil, apierrors.NewBadRequest(q.refusal)
	}
	return q, errs, nil
}

// parse is Catalog.Parse with its lookups: stores for the cached types,
// uncached, if not nil, for the types nodeproxy does not cache.
func parse(spec *v1alpha1.BulkGetOperationSpec, stores func(metav1.GroupVersionResource) *cache.Store, uncached Uncached) ([]*Query, field.ErrorList, error) {
	if len(spec.Operations) == 0 {
		return nil, field.ErrorList{field.Required(operationsPath, "at least one operation")}, nil
	}
	if len(spec.Operations) > MaxOperations {
		return nil, field.ErrorList{field.TooMany(operationsPath, len(spec.Operations), MaxOperations)}, nil
	}
	var (
		errs    field.ErrorList
		refused []string
	)
	queries := make([]Query, len(spec.Operations))
	out := make([]*Query, len(spec.Operations))
	for i := range spec.Operations {
		q := &queries[i]
		q.index = i
		errs = append(errs, q.parse(&spec.Operations[i], stores, uncached)...)
		if q.lookupErr != nil {
			return nil, nil, q.lookupErr
		}
		if q.refusal != "" {
			refused = append(refused, q.Path().Child("options", "fieldSelector").String()+": "+q.refusal)
		}
		out[i] = q
	}
	if len(refused) > 0 {
		// kube-apiserver converts field selectors before it validates
		// anything else: its 400 comes first, with its words, each
		// naming its operation.
		return nil, nil, apierrors.NewBadRequest(strings.Join(refused, "; "))
	}
	if len(errs) > 0 {
		return nil, errs, nil
	}
	return out, nil, nil
}

var (
	operationsPath = field.NewPath("spec", "operations")
	selectorPath   = field.NewPath("selector")
)

func (q *Query) parse(op *v1alpha1.GetOperation, stores func(metav1.GroupVersionResource) *cache.Store, uncached Uncached) field.ErrorList {
	q.namespace, q.resource = op.Namespace, op.Resource
	q.store = stores(op.Resource)
	if q.store == nil {
		// The bulk API itself is never passed through: it would come
		// back here, as kube-apiserver's aggregator routes it to
		// nodeproxy.
		if uncached == nil || op.Resource.Group == v1alpha1.GroupName {
			return field.ErrorList{field.NotSupported(q.Path().Child("resource"), gvrString(op.Resource), servedResources())}
		}
		return q.parseUncached(op, uncached)
	}
	errs := q.parseNamespace(op, q.store.Namespaced)
	q.kind = graphKinds[op.Resource.Resource]
	return append(errs, q.parseOptions(&op.Options)...)
}

func (q *Query) parseNamespace(op *v1alpha1.GetOperation, namespaced bool) field.ErrorList {
	var errs field.ErrorList
	switch {
	case !namespaced && op.Namespace != "":
		errs = append(errs, field.Invalid(q.Path().Child("namespace"), op.Namespace,
			fmt.Sprintf("must be empty: %s are cluster-scoped", op.Resource.Resource)))
	case op.Namespace != "":
		for _, msg := range apimachineryvalidation.ValidateNamespaceName(op.Namespace, false) {
			errs = append(errs, field.Invalid(q.Path().Child("namespace"), op.Namespace, msg))
		}
	}
	return errs
}

func (q *Query) parseOptions(in *metav1.ListOptions) field.ErrorList {
	var errs field.ErrorList
	options := func() *field.Path { return q.Path().Child("options") }
	if q.watch {
		return q.parseWatchOptions(in, options)
	}
	if in.Watch {
		errs = append(errs, field.Forbidden(options().Child("watch"), "a bulk get does not watch; use the bulk watch"))
	}
	if in.AllowWatchBookmarks {
		errs = append(errs, field.Forbidden(options().Child("allowWatchBookmarks"), "a bulk get does not watch; use the bulk watch"))
	}
	if in.ResourceVersionMatch != "" || in.SendInitialEvents != nil {
		// The rare options get kube-apiserver's own checks.
		opts := metainternalversion.ListOptions{
			ResourceVersion: in.ResourceVersion, ResourceVersionMatch: in.ResourceVersionMatch,
			Continue: in.Continue, SendInitialEvents: in.SendInitialEvents,
		}
		for _, e := range listvalidation.ValidateListOptions(&opts, false) {
			e.Field = options().String() + "." + e.Field
			errs = append(errs, e)
		}
	}
	if in.Limit < 0 {
		errs = append(errs, field.Invalid(options().Child("limit"), in.Limit, "must not be negative"))
	}
	q.limit = in.Limit
	return append(errs, q.parseSelectors(in, options)...)
}

// parseWatchOptions reads the options of a bulk watch channel:
// resourceVersion, allowWatchBookmarks, sendInitialEvents and the
// selectors. A channel is one watch, so paging and exact versions do not
// apply; sendInitialEvents does not need resourceVersionMatch.
func (q *Query) parseWatchOptions(in *metav1.ListOptions, options func() *field.Path) field.ErrorList {
	var errs field.ErrorList
	if in.Limit != 0 {
		errs = append(errs, field.Forbidden(options().Child("limit"), "a watch channel is not paged"))
	}
	if in.Continue != "" {
		errs = append(errs, field.Forbidden(options().Child("continue"), "a watch channel is not paged"))
	}
	if in.ResourceVersionMatch != "" && in.ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan {
		errs = append(errs, field.NotSupported(options().Child("resourceVersionMatch"), in.ResourceVersionMatch, []string{string(metav1.ResourceVersionMatchNotOlderThan), ""}))
	}
	q.bookmarks, q.initialEvents = in.AllowWatchBookmarks, in.SendInitialEvents
	errs = append(errs, q.parseSelectors(in, options)...)
	if q.reachableFrom != "" {
		errs = append(errs, field.Forbidden(options().Child("fieldSelector"), ReachableFromField+" is for bulk get; a watch channel names what it watches"))
	}
	// kube-apiserver (cacher.getWatchCacheResourceVersion) reads a
	// streaming list from "" consistently: the initial state no older
	// than etcd when the watch arrived. Without sendInitialEvents, "" is
	// its legacy "any": the watch cache's state, then its changes.
	q.consistent = in.ResourceVersion == "" && in.SendInitialEvents != nil && *in.SendInitialEvents
	if in.ResourceVersion != "" && in.ResourceVersion != "0" {
		rv, err := strconv.ParseUint(in.ResourceVersion, 10, 64)
		if err != nil {
			errs = append(errs, field.Invalid(options().Child("resourceVersion"), in.ResourceVersion, "must be a number"))
		}
		q.rv, q.rvSet = rv, true
	}
	return errs
}

func (q *Query) parseSelectors(in *metav1.ListOptions, options func() *field.Path) field.ErrorList {
	var errs field.ErrorList
	q.labels = labels.Everything()
	if in.LabelSelector != "" {
		sel, err := labels.Parse(in.LabelSelector)
		if err != nil {
			errs = append(errs, field.Invalid(options().Child("labelSelector"), in.LabelSelector, err.Error()))
		}
		q.labels = sel
	}
	q.fieldSelector = fields.Everything()
	if in.FieldSelector != "" {
		sel, err := fields.ParseSelector(in.FieldSelector)
		if err != nil {
			return append(errs, field.Invalid(options().Child("fieldSelector"), in.FieldSelector, err.Error()))
		}
		q.fieldSelector = sel
		errs = append(errs, q.parseFields(sel, in.FieldSelector, options)...)
	}
	if q.watch {
		return errs
	}
	return append(errs, q.parseVersion(in, options)...)
}

func (q *Query) parseFields(sel fields.Selector, raw string, options func() *field.Path) field.ErrorList {
	path := func() *field.Path { return options().Child("fieldSelector") }
	var errs field.ErrorList
	ofType := selectableFields[q.store.Resource.Resource]
	q.fieldRequirements = sel.Requirements()
	for _, r := range q.fieldRequirements {
		equal := r.Operator == selection.Equals || r.Operator == selection.DoubleEquals
		if r.Field == ReachableFromField {
			if !equal || r.Value == "" {
				errs = append(errs, field.Invalid(path(), raw, ReachableFromField+" takes one node name, with ="))
				continue
			}
			if q.store.Resource.Resource == "nodes" {
				q.name = pickEqual(q.name, r.Value) // a node reaches only itself
			}
			q.reachableFrom = r.Value
			continue
		}
		f, known := ofType.known[r.Field]
		switch {
		case !known:
			// kube-apiserver stops at the first field it does not know.
			if q.refusal == "" {
				q.refusal = ofType.refuse(r.Field)
			}
			continue
		case !ofType.evaluated[f]:
			errs = append(errs, field.NotSupported(path(), r.Field, supportedFields(ofType)))
			continue
		}
		r.Field = f
		switch {
		case f == fieldName && equal:
			q.name = pickEqual(q.name, r.Value)
		case f == fieldNodeName && equal:
			q.node = pickEqual(q.node, r.Value)
		}
		q.fields = append(q.fields, r)
	}
	if q.reachableFrom != "" && q.kind == 0 && q.store.Resource.Resource != "nodes" {
		errs = append(errs, field.Invalid(path(), raw, ReachableFromField+" is not supported for "+q.store.Resource.Resource))
	}
	return errs
}

// pickEqual keeps the first value of repeated equality requirements; if
// they differ, nothing can match, which the requirements themselves say
// when they are evaluated.
func pickEqual(prev, v string) string {
	if prev != "" {
		return prev
	}
	return v
}

func (q *Query) parseVersion(in *metav1.ListOptions, options func() *field.Path) field.ErrorList {
	if in.Continue != "" {
		if in.ResourceVersion != "" && in.ResourceVersion != "0" {
			return field.ErrorList{field.Forbidden(options().Child("resourceVersion"), "specifying resource version is not allowed when using continue")}
		}
		key, rv, err := storage.DecodeContinue(in.Continue, "/")
		if err != nil || rv <= 0 {
			return field.ErrorList{field.Invalid(options().Child("continue"), in.Continue, "not a continue token of this server")}
		}
		q.contKey, q.contRV = key, uint64(rv)
		return nil
	}
	switch in.ResourceVersion {
	case "":
		// kube-apiserver's "most recent": a consistent read.
		q.consistent = true
		return nil
	case "0":
		return nil
	}
	rv, err := strconv.ParseUint(in.ResourceVersion, 10, 64)
	if err != nil {
		return field.ErrorList{field.Invalid(options().Child("resourceVersion"), in.ResourceVersion, "must be a number")}
	}
	q.rv, q.rvSet = rv, true
	q.exact = in.ResourceVersionMatch == metav1.ResourceVersionMatchExact
	return nil
}

func gvrString(r metav1.GroupVersionResource) string {
	if r.Group == "" {
		return r.Version + "/" + r.Resource
	}
	return r.Group + "/" + r.Version + "/" + r.Resource
}

func servedResources() []string {
	out := make([]string, 0, len(cache.Resources))
	for _, r := range cache.Resources {
		out = append(out, r.GroupVersion().String()+"/"+r.Resource)
	}
	return out
}

func supportedFields(s selectable) []string {
	out := []string{ReachableFromField}
	for f := range s.evaluated {
		out = append(out, f)
	}
	slices.Sort(out)
	return out
}
