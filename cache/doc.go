// Package cache holds nodeproxy's one per-cluster copy of the objects
// kubelets read: pods, secrets, configmaps, persistentvolumeclaims,
// persistentvolumes, serviceaccounts and nodes, kept current by shared
// informers.
//
//	kube-apiserver --list/watch--> informers --transform--> stores --> readers
//	                                            (strip managedFields)
//
// Invariants:
//   - One informer per resource type for the whole process, whatever the
//     number of readers: the cluster sees one watch per type from nodeproxy
//     instead of one per object per node.
//   - Objects are stored without metadata.managedFields. Nothing nodeproxy
//     serves needs them, and on a server-side-applied object they are often
//     the largest part of the metadata.
//   - Readiness means every informer has listed once (HasSynced); before
//     that an empty store would read as "the object does not exist", which
//     for an authorizer is a wrong deny and for a watch a wrong DELETED.
//
// Later work adds, per resource type, a bounded log of changes ordered by
// resourceVersion, so that a watch from a listed resourceVersion misses
// nothing and repeats nothing.
package cache
