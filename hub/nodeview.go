package hub

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/nodeview"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// channelRouter opens a node view channel with the node view's handler
// and every other channel with the bulk watch's: one websocket carries
// both, so a node endpoint moving to the view keeps its connection.
type channelRouter struct {
	views, watches watchmux.Handler
	// viewVersions are the versions of the node view served
	// (--node-view-versions); nil: every one.
	viewVersions sets.Set[string]
}

func (r channelRouter) Open(ctx context.Context, sel *v1alpha1.GetOperation, sink watchmux.Sink) (func(), *metav1.Status) {
	if nodeview.Selects(sel) {
		if v := sel.Resource.Version; r.viewVersions != nil && !r.viewVersions.Has(v) {
			// 422, as a replica of a release without the version
			// answers: the node endpoint opens v1alpha1 on it.
			return nil, &apierrors.NewInvalid(v1alpha1.SchemeGroupVersion.WithKind("BulkGetOperation").GroupKind(), "", field.ErrorList{
				field.NotSupported(field.NewPath("selector", "resource", "version"), v, sets.List(r.viewVersions)),
			}).ErrStatus
		}
		return r.views.Open(ctx, sel, sink)
	}
	return r.watches.Open(ctx, sel, sink)
}
