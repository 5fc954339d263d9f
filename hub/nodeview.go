package hub

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/nodeview"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// channelRouter opens a node view channel with the node view's handler
// and every other channel with the bulk watch's: one websocket carries
// both, so a node endpoint moving to the view keeps its connection.
type channelRouter struct {
	views, watches watchmux.Handler
}

func (r channelRouter) Open(ctx context.Context, sel *v1alpha1.GetOperation, sink watchmux.Sink) (func(), *metav1.Status) {
	if nodeview.Selects(sel) {
		return r.views.Open(ctx, sel, sink)
	}
	return r.watches.Open(ctx, sel, sink)
}
