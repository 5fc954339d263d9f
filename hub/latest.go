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
// The bulk requests ask it, at most one request in flight per type (and
// one queued), for every consistent read and when a channel resumes from
// a version this replica's cache has not reached; each answer also
// settles every later resume at or below it. That
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

var _ bulk.SelectedVersions = latestVersions{}

// SelectedVersions lists what a consistent read selects, metadata only,
// with resourceVersion "" (kube-apiserver serves it from its watch cache
// once that has caught up with etcd). It is asked only when the cache of
// the type has not reached kube-apiserver's version within
// bulk.StoreLagAllowance, which on a quiet type is every read until the
// next bookmark; the selection is the operation's (one object, for a
// kubelet's reads), so its cost is the answer's.
func (l latestVersions) SelectedVersions(ctx context.Context, resource schema.GroupVersionResource, namespace, fieldSelector, labelSelector string) (uint64, []bulk.ObjectVersion, error) {
	list, err := l.client.Resource(resource).Namespace(namespace).List(ctx, metav1.ListOptions{FieldSelector: fieldSelector, LabelSelector: labelSelector})
	if err != nil {
		return 0, nil, fmt.Errorf("list %s in %q with %q, %q: %w", resource.Resource, namespace, fieldSelector, labelSelector, err)
	}
	rv, err := strconv.ParseUint(list.ResourceVersion, 10, 64)
	if err != nil {
		return 0, nil, fmt.Errorf("list %s: resourceVersion %q: %w", resource.Resource, list.ResourceVersion, err)
	}
	out := make([]bulk.ObjectVersion, 0, len(list.Items))
	for i := range list.Items {
		m := &list.Items[i]
		v, err := strconv.ParseUint(m.ResourceVersion, 10, 64)
		if err != nil {
			return 0, nil, fmt.Errorf("list %s: %s/%s: resourceVersion %q: %w", resource.Resource, m.Namespace, m.Name, m.ResourceVersion, err)
		}
		out = append(out, bulk.ObjectVersion{Namespace: m.Namespace, Name: m.Name, RV: v})
	}
	return rv, out, nil
}
