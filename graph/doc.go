// Package graph holds nodeproxy's authorization graph: which node may reach
// which object, through the pods bound to it.
//
// The edges are the ones kube-apiserver's in-tree Node authorizer follows:
//
//	secret --------------------\
//	configmap ------------------\
//	serviceaccount --------------> pod ----> node
//	resourceclaim --------------/    ^
//	pvc ------------------------/    |  (spec.nodeName)
//	 ^
//	 | (spec.claimRef)
//	 pv <---- secret (kubelet-visible secret references of the PV)
//
//	volumeattachment ----------------------> node
//	resourceslice -------------------------> node
//
// An object is reachable from node N when a path leads from it to N: a
// secret used by a pod on N, a PV bound to a PVC that a pod on N mounts, a
// secret of that PV.
//
// # Reachability instead of walks
//
// The reference answers each question with a depth-first walk under a
// read lock. Here every object carries, per node, the number of paths
// from it to that node, kept current on every write: adding a pod on N adds
// one path to N for the pod and for each object it references; binding a PV
// to a PVC gives the PV (and the PV's secrets) the PVC's paths. A question
// is then one map lookup, the same cost for allow and for deny:
//
//	Reachable(N, ref) == paths[ref][N] > 0
//
// Paths are counted rather than marked so that removals are local: a
// secret shared by two pods on N stays reachable when one of them goes.
// The graph is a DAG of depth three (secret -> pv -> pvc -> pod), so a write
// touches the objects of one pod or one PV and never walks the graph.
//
// # Locking
//
// Readers take no lock at all. Objects live in an open-addressing table
// that one writer changes and readers probe with atomic loads (rtable);
// each object's reachability is an atomic word: no node, one node id, or
// "many" with the set of node ids beside it (see "Shared sets"). A lock that readers hold, even
// for one map lookup, is a lock a reader can be preempted while holding,
// and with thousands of runnable readers that reader may not run again
// for seconds: the reference's writers wait behind exactly that. Here no
// writer ever waits for a reader.
//
// Writers are serialized by Graph.mu, held for a whole write (one pod, one
// PV), which is also what orders change notifications. Functions whose
// names end in Locked require Graph.mu; fields marked "writer only" are
// touched under it alone.
//
// A reader racing a write sees each object either before or after it, not
// the write as a whole: a decision is about one object, so this is the
// answer the reference gives a decision that takes its read lock just
// before or just after the write.
//
// # Shared sets
//
// An object that k nodes reach (k > 1) keeps the set of their ids, and
// costs O(k) whatever the highest node id in the cluster: a secret two
// nodes share costs about 140 bytes at 100,000 node ids, not a
// bitset up to the highest id. The set has two forms (nodeset.go), the
// smaller one taken:
//
//	sorted   an immutable sorted []uint32, published by atomic pointer,
//	         with the changes since it was built beside it (one sorted
//	         list of ids added and removed); a reader bisects the
//	         changes, then the set; the writer publishes the changes
//	         anew, and rebuilds the set once they outnumber sqrt(2k)
//	bitmap   a bit per id up to the highest member, once that is smaller
//	         (over 2 members per 64 ids); the writer flips bits in place
//
// with a factor of two between the switch points, so a set at the
// boundary does not change form on every write. Path counts are the
// writer's alone and kept only where a node has more than one path.
//
// Why this and not one of the simpler forms: a sorted slice alone costs
// the writer a copy of the whole set per change, and an object every node
// reaches is common (a kube-system secret a DaemonSet mounts: 400 KB
// copied per pod replaced at 100,000 nodes); once a set is that dense a
// bitmap is no larger and a change is one atomic bit. A mid-sized set
// (a Deployment's configmap on 1,000 of 100,000 nodes) is too sparse for
// the bitmap and too large to copy per change, hence the changes beside
// it: O(sqrt k) bytes a change instead of O(k). A roaring bitmap
// (containers per 65,536 ids) adds nothing at these sizes (100,000 ids
// are two containers, each copied whole on a change), and its library
// cannot be read while a writer changes it: it would need a clone per
// change. The figures are in docs/benchmarks.md ("The graph's shared
// sets").
//
// A writer moving a set between forms builds the new form whole and
// publishes it with one atomic store; a reader that loaded the old one
// answers as before the write. The move between one node and many keeps
// its order: the set is published before reach says "many", and reach
// names the single node before the set is dropped.
//
// # Memory
//
// An object costs a 48-byte entry and about 20 bytes of table; a pod
// record, its references as pointers; an object several nodes reach, its
// set. What the reference shape (100k pods) retains is
// BenchmarkPopulation's retained-MB (docs/architecture.md, "The graph").
//
// # Changes
//
// Observers learn, per (node, object), when reachability appears and when
// it vanishes, in write order, from the writer's goroutine after the write
// (see Observe). A write that leaves an object's reachability from a node
// as it was (a pod updated in place, a pod recreated under the same name on
// the same node) reports nothing for it.
package graph
