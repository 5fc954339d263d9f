// Package nodecopy holds the node endpoint's copy of its node's view
// (docs/api.md, "The node view" and "Reads from the node's copy"):
// everything one node may read, as the hub sends it over one channel,
// from which the endpoint answers its kubelet's gets, lists and watches.
//
//	hub channel --batches (events, then a bookmark)--> Copy.Apply
//	                                                      |
//	       objects per type, position, change log  <------'
//	          |            |                 |
//	        List, Get    WatchInitial     WatchFrom(rv) --Watch.Next--> the kubelet's watch
//
// A Copy is a synchronous data structure under one lock: Apply takes a
// batch in whole, readers read under the read lock, and a watch is a
// cursor in the change log that Next reads from, waiting on a channel
// each Apply closes. Nothing in the package starts a goroutine; the
// endpoint's request goroutines and its one follower drive it.
//
// Invariants:
//   - The copy is always the view at the position of the last batch
//     applied: a batch is applied whole or, if its position does not
//     parse or goes back past what the copy holds (ErrGoesBack), not at
//     all. A position holds a type's state from its Since to its At, so
//     an At lower than the copy's but not before its Since (a resume on
//     a replica behind on a quiet type) is taken as the copy's position,
//     and the versions the copy answers at never go back. An object no node may have whatever
//     the graph says (a pod of another node, another node's Node) is
//     refused and the rest of its batch applied.
//   - A watch from a resourceVersion sees every change of its type after
//     it that its selector selects, once, in the order applied; if the
//     log no longer holds them all, the watch is ErrExpired (410), except
//     for one object by name, whose current state stands for what was
//     missed (as on the hub).
//   - A view opened afresh (an initial state applied to a copy that
//     holds one) is the difference for the copy's watches, as a relist
//     is for a reflector's store: each object's last state, what is gone
//     deleted (or, for the graph's kinds, gone from the view). The copy
//     never goes back: from a replica behind it, it keeps what it has
//     that is newer. After Clear, watches are ErrExpired.
//   - A watch of one object by name ends (ErrLeft) when the object
//     leaves the node's view: no state of it follows.
//   - An object is kept as the bytes it came in, kube-apiserver's
//     protobuf or JSON, and read (its head) without decoding the rest:
//     what a reader is given is what the hub sent, but for the
//     resourceVersion of a DELETED the copy makes at a version of its
//     own.
//
// Persistence is nodecopy/disk's.
package nodecopy
