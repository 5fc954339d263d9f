package watch

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeproxy/nodeproxy/bulk"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// openUncached opens a channel on a type nodeproxy does not cache: a
// watch on kube-apiserver as the caller, whose answer decides the open
// (nodeproxy authorizes nothing here). The channel is one watch on
// kube-apiserver for as long as it is open: nothing is shared with other
// channels, unlike a cached type's.
func (w *Watcher) openUncached(ctx context.Context, q *bulk.Query, sink watchmux.Sink) (func(), *metav1.Status) {
	run, err := w.catalog.Uncached().Watch(ctx, *q.Uncached(), q.Namespace(), q.Options(), sink)
	if err != nil {
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			st := status.Status()
			return nil, &st
		}
		return nil, &apierrors.NewInternalError(err).ErrStatus
	}
	return run, nil
}
