// Package cache holds nodeproxy's one per-cluster copy of the objects
// nodes read: pods, secrets, configmaps, persistentvolumeclaims,
// persistentvolumes, serviceaccounts and nodes; the cluster-wide types
// kubelets and kube-proxy watch whole: services, endpointslices,
// servicecidrs, runtimeclasses and csidrivers (and, for the authorization
// graph only, volumeattachments and resourceslices; for the node views
// only, csinodes).
//
//	kube-apiserver --list/watch (one per type)--> Reflector --> Store
//	                                                             |  1. handlers (the graph)
//	                                                             |  2. publish
//	                                                             v
//	                       readers <--atomic load-- Snapshot{RV, objects, pods by node}
//	                                                             |
//	                                        change log (ring) ---+  Changes(rv), At(rv)
//	                                                             |
//	                                        Encoder (LRU of JSON per object version)
//
// Each type has a client-go Reflector (list, then watch, with its retries,
// backoff and bookmarks) that writes into a Store, as kube-apiserver's
// watch cache does. Its retries wait ReflectorBackoff (at most 3 s), not
// client-go's default (up to 60 s): one reflector holds every node's data.
// Its ListerWatcher reports how each list and watch went to the store's
// Freshness, which /readyz and /metrics read. A Store publishes immutable Snapshots: copy-on-write
// B-trees by namespace/name and, for pods, by spec.nodeName. Readers load
// the current snapshot with one atomic read and never block the writer.
//
// Invariants:
//   - One list and one watch per type on kube-apiserver for the whole
//     process, whatever the number of readers.
//   - A change reaches the store's handlers (the authorization graph)
//     before any reader can see it. So whoever saw a pod can read what it
//     references: nodeproxy never denies a node an object because its
//     graph is behind what that node has already been shown.
//   - Changes are published in resourceVersion order. A watch from the
//     resourceVersion of any snapshot, list or event misses nothing and
//     repeats nothing: Snapshot.Changes(rv) returns exactly the changes
//     after rv, or ErrExpired when the log no longer holds them all (the
//     caller relists, as after kube-apiserver's 410 Gone).
//   - A relist (after the first list) goes into the change log as the
//     difference between the old state and the list, in resourceVersion
//     order: ADDED and MODIFIED at the objects' own resourceVersions; for
//     a name whose UID changed, the old object's DELETED before the new
//     one's ADDED; DELETED for what the list lacks. Each DELETED takes the
//     latest version no other event holds, after the store's and before
//     what must follow it (the new object's ADDED, else the list's
//     version), one event a version; kube-apiserver's etcd spends a
//     revision on every deletion, so such versions always exist for its
//     lists. A watch from before the relist ends at a state equal to the
//     list, never sees a version go back, and, resumed from the version
//     of any snapshot or of any event outside the relist's span, misses
//     and repeats nothing. Versions strictly inside the span are no resume
//     points (ErrExpired), and exact reads there get ErrExpired too.
//   - Only inside that span may events share a version: where the
//     versions do not suffice, the deletions left over share the span's
//     first one, ahead of the rest, and since nobody resumes from it, no
//     watch can stop between two of them and skip the second (as
//     kube-apiserver's watch cache would, resuming after every event at
//     the version given). The list's version is a resume point and is
//     never shared. Where the span has no version inside it and more than
//     one change, where a listed object changed outside it, where two
//     listed objects share a version, or where the list is older than
//     the store, the log starts over and watches from before expire
//     (nodeproxy_cache_relist_log_restarts_total says why).
//   - Each store knows how fresh it is (Freshness): when kube-apiserver
//     last told it anything (an event, a bookmark, a list), and since when
//     its lists and watches have all failed. A list answered or a watch
//     accepted ends an outage; a list or watch refused, failed, or ended
//     with ERROR (410 Expired after a kube-apiserver restart) starts one.
//     A quiet type hears only bookmarks, about one a minute, so time since
//     the last news is no failure by itself; an outage is.
//   - Objects are stored without metadata.managedFields and without type
//     meta, once: the indexes hold pointers, not copies. Pods are kept as
//     kube-apiserver's protobuf (bytes.go) beside an index of their keys,
//     labels and node, and decoded only for a reader that needs them typed
//     (Object.Typed); other types are kept decoded. A version shares every
//     part it holds unchanged with the version before it: equal segments
//     of its bytes (segments.go), or equal fields of a decoded object,
//     whose lists are also cut to length (slimVersion); so that the change
//     log's history costs what changed, not whole objects. What readers
//     see is what kube-apiserver sent.
//   - The store's handlers (the graph) see every change typed, the
//     version before included, whatever the store keeps.
//   - The log keeps the state after one change in checkpointEvery (and
//     after a relist's batch); At rebuilds the others exactly, undoing the
//     changes from the next kept state back (each change holds the
//     object's state before it).
//   - Every object version is serialized at most once while it stays in
//     the Encoder's LRU, however many readers ask for it. Readers that
//     know a version has one reader (a node's view, of its own pods)
//     encode it outside the LRU (EncodeUncached), once for each time
//     they send it.
//   - Sharded (Options.Held set; nil holds everything, as one replica
//     does): the per-node types keep only the objects of nodes in the
//     held ranges (shard.Range of the node's name): pods by
//     spec.nodeName, of which unbound ones by no replica (no node reads
//     them); nodes and csinodes by name; volumeattachments and
//     resourceslices by spec.nodeName (slices without one, a pool's or
//     network-attached devices, by every replica). The store decides in
//     Add, Update, Delete and Replace, before it keeps or encodes
//     anything, from what client-go decoded (a pod's node from the key
//     fields the list transformer or the store reads anyway): an object
//     turned away reaches neither the change log nor the handlers, and
//     its bytes are never made. client-go still decodes every object of
//     the type; filtering the bytes before its decoder is out of scope
//     here. A pod bound into a held range after being created unbound
//     is ADDED, as a watch with a spec.nodeName field selector shows it;
//     an object whose node leaves the held ranges is DELETED.
//   - Hold changes the held ranges at run time. Dropped ranges leave
//     without change-log events (the hub moves their nodes' connections
//     first; a DELETED would stop a kubelet's pods); the handlers see
//     them deleted. Acquired ranges are listed (one consistent list of
//     the type, by pages, filtered; per-node field-selector lists would
//     spare kube-apiserver the rest, a later optimisation) while their
//     changes wait in a buffer, then taken in with the buffered changes
//     after the list, silently (the handlers see adds). From HeldSince
//     (the latest of the list's version, the store's and the buffered
//     changes') on, the log carries every change of the range's nodes,
//     and drops the watch's changes at or below it, which the list
//     showed already; a reader resuming a node from below its HeldSince
//     must start it whole (nodeview sends the view afresh). acquire.go
//     has why that misses and repeats nothing.
//   - Until a type's first list is in (HasSynced), its store is empty and
//     the server reports not ready: an empty store would read as "the
//     object does not exist", for the authorizer a wrong deny and for a
//     watch a wrong DELETED.
package cache
