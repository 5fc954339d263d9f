package bulk

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/passthrough"
)

// Uncached answers operations on the types nodeproxy does not cache, by
// asking kube-apiserver as the caller; *passthrough.Client is one. Nil
// in a Catalog: such operations are refused, 422, as unsupported.
type Uncached interface {
	// Resolve says whether kube-apiserver serves r (found) and how; err is
	// a failure of discovery itself.
	Resolve(r schema.GroupVersionResource) (t passthrough.Type, found bool, err error)
	// List lists t as the user in ctx and returns kube-apiserver's JSON
	// list, or its Status error.
	List(ctx context.Context, t passthrough.Type, namespace string, opts *metav1.ListOptions) ([]byte, error)
	// Watch opens a watch on t as the user in ctx (the channel's context)
	// and returns run, which feeds sink until the channel closes, or
	// kube-apiserver's Status error if it refused.
	Watch(ctx context.Context, t passthrough.Type, namespace string, opts metav1.ListOptions, sink passthrough.Sink) (run func(), err error)
}

// parseUncached validates an operation on a type nodeproxy does not
// cache: the type must exist (discovery) and serve the verb, the
// namespace fit its scope, the selectors parse. What only the type's
// server knows (which fields it selects on, its resourceVersions) is left
// to kube-apiserver, whose answer is the caller's.
func (q *Query) parseUncached(op *v1alpha1.GetOperation, u Uncached) field.ErrorList {
	resource := func() *field.Path { return q.Path().Child("resource") }
	gvr := schema.GroupVersionResource{Group: op.Resource.Group, Version: op.Resource.Version, Resource: op.Resource.Resource}
	t, found, err := u.Resolve(gvr)
	if err != nil {
		q.lookupErr = err
		return nil
	}
	if !found {
		return field.ErrorList{field.NotFound(resource(), gvrString(op.Resource))}
	}
	verb := "list"
	if q.watch {
		verb = "watch"
	}
	if !t.Supports(verb) {
		return field.ErrorList{field.Forbidden(resource(), gvrString(op.Resource)+" does not support "+verb)}
	}
	q.uncached = &t
	q.options = op.Options
	errs := q.parseNamespace(op, t.Namespaced)
	options := func() *field.Path { return q.Path().Child("options") }
	if !q.watch {
		if op.Options.Watch {
			errs = append(errs, field.Forbidden(options().Child("watch"), "a bulk get does not watch; use the bulk watch"))
		}
		if op.Options.AllowWatchBookmarks {
			errs = append(errs, field.Forbidden(options().Child("allowWatchBookmarks"), "a bulk get does not watch; use the bulk watch"))
		}
	}
	if op.Options.LabelSelector != "" {
		if _, err := labels.Parse(op.Options.LabelSelector); err != nil {
			errs = append(errs, field.Invalid(options().Child("labelSelector"), op.Options.LabelSelector, err.Error()))
		}
	}
	if op.Options.FieldSelector != "" {
		if _, err := fields.ParseSelector(op.Options.FieldSelector); err != nil {
			errs = append(errs, field.Invalid(options().Child("fieldSelector"), op.Options.FieldSelector, err.Error()))
		}
	}
	return errs
}
