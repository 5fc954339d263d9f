package hub

import (
	"context"
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"

	"github.com/nodeproxy/nodeproxy/bulk"
)

// latestVersions asks kube-apiserver for its current resourceVersion of a
// type with the cheapest consistent read there is: a list with
// resourceVersion "" (so the version is at least every one
// kube-apiserver had handed out when it was asked), one item, metadata
// only. kube-apiserver serves it from its watch cache once that has
// caught up with etcd (ConsistentListFromCache), else from etcd, one key.
// The bulk watch asks it, at most one request in flight per type, when a
// channel resumes from a version this replica's cache has not reached;
// each answer also settles every later resume at or below it. That
// coalescing is what bounds the requests, so the client has no
// client-side rate limit (New).
type latestVersions struct{ client metadata.Interface }

var _ bulk.LatestVersions = latestVersions{}

func (l latestVersions) LatestVersion(ctx context.Context, resource schema.GroupVersionResource) (uint64, error) {
	list, err := l.client.Resource(resource).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, fmt.Errorf("list %s with limit 1: %w", resource.Resource, err)
	}
	rv, err := strconv.ParseUint(list.ResourceVersion, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("list %s: resourceVersion %q: %w", resource.Resource, list.ResourceVersion, err)
	}
	return rv, nil
}
