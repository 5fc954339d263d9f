// Package bulk holds what the bulk get (package bulk/get) and the bulk
// watch (package bulk/watch) share: one operation, validated, authorized
// and read. An operation names a type (group, version, resource), a
// namespace and list options (selectors, resourceVersion, paging); a bulk
// get carries up to MaxOperations of them, a watch channel's selector is
// one.
//
// Every request goes the same way:
//
//	spec / selector
//	     |  Catalog.Parse, Catalog.ParseWatch   every error at once (422), each naming its operation
//	     v
//	  []*Query
//	     |  Catalog.Authorize                   nodes: the graph; others: the delegated authorizer
//	     v
//	  allowed
//	     |  ReadAt, ResumeAt, ReadConsistent    a state of the cache at a resourceVersion
//	     |  (+ LatestChecker)                   ("": kube-apiserver's, asked once per type)
//	     v
//	  Snapshot --Query.Ascend, Query.Matches--> the objects, for bulk/get and bulk/watch
//
// A Catalog is built once from the cache, the graph's Reachability, the
// node and delegated authorizers and, optionally, an Uncached (types the
// cache does not hold, answered by kube-apiserver as the caller). It
// imports neither bulk/get nor bulk/watch, and nothing in cache, graph,
// authorizer or watchmux imports it.
//
// Invariants:
//   - Nothing partial is ever returned: a request is validated whole,
//     then authorized whole, before anything is read.
//   - Every operation on a cached type is authorized before anything of
//     it is read; an uncached one is decided by kube-apiserver, as the
//     caller, when it is read.
//   - Never an allow on error: an authorizer that fails refuses with 500,
//     which a client retries, never with an allow.
//   - A node identity is decided as kube-apiserver's chain Node,RBAC
//     decides it: on the types the graph decides, by the graph alone
//     (asking kube-apiserver would come back to nodeproxy's own webhook),
//     its "no" final; on the cluster-wide types by the Node authorizer's
//     static rules, then, where they have no opinion, by the delegated
//     authorizer. Everyone else is asked as the list or watch the
//     operation amounts to, with its selectors.
//   - resourceVersion means what kube-apiserver's watch cache makes it
//     mean: "" on a list or a streaming list a consistent read, no older
//     than kube-apiserver's state when the request arrived (ReadConsistent:
//     one coalesced question per type, 500 ServerTimeout when it cannot be asked, never
//     the cache as it stands); "0" (and "" on a plain watch) the cache's
//     latest state; N a state at least as new (waiting
//     up to 3 s for the cache, then 504 "Too large resource version");
//     N with resourceVersionMatch=Exact the state at N, or 410 once the
//     change log no longer holds it.
package bulk
