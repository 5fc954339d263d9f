// Package watch is the bulk watch: the watchmux.Handler (Watcher) that
// opens a channel on a selector, sends its initial state, and feeds it the
// cache's changes for as long as its caller may see them. Importers that
// also use k8s.io/apimachinery/pkg/watch name it bulkwatch.
//
//	cache Store (change log) --one goroutine per type--> dispatcher
//	                                                       |  index: by name, by node, scan
//	                                                       |  each change encoded once
//	                                                       v
//	                                                    streams --Sink.Send--> watchmux sinks
//	                                                       ^
//	graph changes --observer--> revocations --ERROR 403----'  (a node's named channels)
//	RBAC changes --Recheck--> reauthorizer --ERROR 403-----'  (channels kube-apiserver decides)
//
// Open validates and authorizes a selector (package bulk), holds a
// channel from a resourceVersion the cache has not reached until it does
// or kube-apiserver vouches for it (bulk.ResumeAt), then the channel joins
// its type's dispatcher at a definite position. A type the cache does not
// hold is one watch on kube-apiserver, as the caller, per channel.
//
// Invariants:
//   - A channel from a listed resourceVersion misses nothing and repeats
//     nothing: it replays the change log from its version to where
//     dispatching is, under the dispatcher's lock, then receives what
//     follows. One the log no longer reaches ends with ERROR 410, except a
//     channel naming one object, which gets that object's current state as
//     at most one event.
//   - A node's channel on a named object ends with ERROR 403 the moment
//     the graph says the node no longer reaches the object: it is
//     registered before it is authorized, and the graph's observer runs
//     with the graph's write lock held.
//   - Channels of other users, and a node's channels on types the graph
//     does not decide (bulk.Query.GraphDecided), are authorized again after
//     each RBAC change that names their user (twice: past the authorizer's
//     cache, and once kube-apiserver's RBAC has surely heard of it), every
//     ReauthorizeInterval if set, and every minute while nobody reports
//     RBAC's changes; they end with ERROR 403 once refused; an authorizer
//     error keeps them, and their user is asked about again 10 s later.
//   - An event is encoded once per change, not once per channel: every
//     channel that selects it shares the cache's encoded bytes.
//   - A send never blocks the dispatcher (watchmux queues it), so one slow
//     channel holds back no other.
package watch
