// Package shard says which hub replica serves which node, when the hub
// runs as several replicas that each hold a share of the nodes (issue 38;
// docs/architecture.md, "Sharding").
//
//	node name --FNV-1a 64--> hash --mixed, top 12 bits--> range (of 4096)
//	                                                  |
//	ready replicas (the headless Service's            | rendezvous: the two
//	EndpointSlices, by pod name) -------------------->| members of highest
//	                                                  v weight(range, member)
//	                                   Table: range -> owner, secondary
//
// The hash is kube-apiserver's own for sharded list and watch (KEP-5866,
// k8s.io/apimachinery/pkg/sharding.HashField). A range is not a
// contiguous slice of it, though: FNV-1a leaves names that differ in
// their last characters together in its top bits, so ranges are cut from
// the hash mixed (RangeOfHash).
//
// Invariants:
//   - A Table is a pure function of its set of members: every replica
//     and every caller that knows the same ready replicas computes the
//     same owners, with no leader and nothing stored.
//   - With one member, or none, every range is owned by it (or by
//     nobody and held by everybody, Unsharded): one replica is unsharded.
//   - A member that joins or leaves moves only the ranges it takes or
//     gave up (rendezvous hashing): each range's order of members is
//     fixed, and a range goes to the next member in its order.
//   - Every range has a secondary whenever there are two members or
//     more; the secondary holds the range warm, so that the owner's loss
//     moves the range to a replica that already has it.
//   - A Table never changes after it is made; a new membership makes a
//     new Table.
package shard
