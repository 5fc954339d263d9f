// Package passthrough answers bulk operations on resource types nodeproxy
// does not cache, by asking kube-apiserver as the caller.
//
//	bulk get operation / bulk watch channel on an uncached type
//	        |
//	   Resolver (discovery: does group/version/resource exist, is it
//	        |    namespaced, may it be listed/watched?)
//	        v
//	   Client.List / Client.Watch  --Impersonate-*-->  kube-apiserver
//	                                                    (routes to CRDs and
//	                                                     aggregated servers)
//
// Invariants:
//   - Every request to kube-apiserver carries the caller's identity
//     (impersonation, identity.go). A request whose context holds no user
//     is refused before it leaves the process: nodeproxy never reads an
//     uncached type as itself.
//   - kube-apiserver decides; nodeproxy neither allows nor refuses an
//     uncached operation. A refusal (403), a missing type (404) or any
//     other Status from kube-apiserver is handed back unchanged.
//   - A list is returned as kube-apiserver encoded it: the type's own
//     resourceVersion, its own continue token.
//   - A watch channel is one watch on kube-apiserver, relayed event by
//     event as kube-apiserver encoded it, read no faster than the channel
//     takes events (Sink's WaitRoom): nothing dropped, nothing shared.
//     kube-apiserver's ERROR is the channel's last event; a watch that
//     ends without one is opened again from the last resourceVersion
//     relayed once there is a resume point (a bookmark, or a watch from a
//     version without initial state), and otherwise the channel ends with
//     an ERROR: never silently (watch.go, relay.go).
//   - Discovery is cached per group/version and fetched again on a miss,
//     at most once per MinRefreshInterval per group/version, so a CRD
//     created after start is found within that interval and a stream of
//     requests for types that do not exist costs kube-apiserver at most
//     one discovery request per group/version per interval.
package passthrough
