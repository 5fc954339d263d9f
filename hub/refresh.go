package hub

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/metadata"

	"github.com/nodeproxy/nodeproxy/authorizer"
	"github.com/nodeproxy/nodeproxy/cache"
)

var podsResource = corev1.SchemeGroupVersion.WithResource("pods")

// newRefresher wires the node authorizer's refresher (authorizer/refresh.go)
// to kube-apiserver and to the cache's pods store, which feeds the graph.
func newRefresher(client metadata.Interface, objects *cache.Cache, o authorizer.RefreshOptions) (*authorizer.NodeRefresher, error) {
	pods := objects.Store(podsResource)
	if pods == nil {
		return nil, fmt.Errorf("the cache holds no %s", podsResource)
	}
	return authorizer.NewNodeRefresher(latestPodVersion(client), awaitStore(pods), o)
}

// latestPodVersion lists a node's pods from kube-apiserver, metadata
// only: resourceVersion "" makes it a consistent read, which
// kube-apiserver serves from its watch cache once that has caught up with
// etcd, using its spec.nodeName index. About 500 bytes a pod.
func latestPodVersion(client metadata.Interface) authorizer.LatestPodVersion {
	pods := client.Resource(podsResource)
	return func(ctx context.Context, node string) (uint64, error) {
		list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
		if err != nil {
			return 0, err
		}
		var latest uint64
		for i := range list.Items {
			m := &list.Items[i].ObjectMeta
			rv, err := strconv.ParseUint(m.ResourceVersion, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("pod %s/%s has resourceVersion %q: %w", m.Namespace, m.Name, m.ResourceVersion, err)
			}
			latest = max(latest, rv)
		}
		return latest, nil
	}
}

// awaitStore returns once s has published a state at rv or later, and
// so its graph has applied every change up to rv.
func awaitStore(s *cache.Store) authorizer.AwaitPods {
	return func(ctx context.Context, rv uint64) error {
		if snap, err := s.Await(ctx, rv); err != nil {
			return fmt.Errorf("the %s cache is at resourceVersion %d: %w", s.Resource.Resource, snap.RV, err)
		}
		return nil
	}
}
