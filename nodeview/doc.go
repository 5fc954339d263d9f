// Package nodeview serves the node view: one bulk watch channel per node
// that carries everything the node may read, its Node and (from view
// version v1alpha2) its CSINode, its pods, every
// object the authorization graph lets it reach (secrets, configmaps,
// service accounts, claims, the volumes bound to those claims), the
// services of default and of the namespaces of its pods (services.go),
// and the cluster-wide types the kubelet reads (runtime classes, CSI
// drivers). Objects entering and leaving the view are events too. The
// protocol, its ordering and the proof of its resume are in docs/api.md,
// "The node view".
//
//	cache stores, one per type
//	     |  Snapshot.Changes(pos[type]), type by type in types order
//	     v
//	Views.Step (one goroutine) --route: pods and Nodes by node, graph kinds by object,
//	     |                              volumes by their claim, services by namespace
//	     |                              (default's to all), cluster-wide to all
//	     v
//	view (one per open channel, synchronous) --ADDED MODIFIED DELETED ENTERED LEFT, BOOKMARK--> watchmux.Sink
//	     |   reaches by graph.PodUses / graph.PVSecrets (the graph's own rules) at its position
//	     '-- sends graph kinds only if the live graph.Reachable agrees
//
//	join: no position -> build at the hub's position, send it whole (Initial), bookmark
//	      a position   -> build at it (Snapshot.At), send the changes since (Snapshot.Changes), bookmark
//
//	progress request (the connection's reader): the stores' versions now --> Views.asked
//	      --> the step whose position reaches them: BOOKMARK {bulk.k8s.io/progress: token}
//
// A view's position is one resourceVersion per type (Position), because
// the hub's stores are per type. What a view holds at a position P is a
// function of P alone: the objects of each type at P[type] that belong to
// the node by the graph's rules applied to the pods and volumes at
// P[pods] and P[persistentvolumes], and the services of default and of
// the namespaces of those pods. Every replica computes the same
// function from the same etcd revisions, which is what lets a view
// resume on any of them.
//
// Why the view computes reachability itself, at its position, rather
// than following the graph's change notifications (Graph.Observe): the
// graph is a single current state, ahead of what the stores have
// published, and its notifications carry no resourceVersion, so a view
// built from them would hold a set no position names and no other
// replica could rebuild. The rules are the graph's (PodUses, PVSecrets),
// so they cannot drift apart, and the live graph still has the last
// word on what is sent.
//
// Invariants:
//   - Between two bookmarks a view sends exactly the change from the view
//     at the first bookmark's position to the view at the second's: each
//     object version at most once, none skipped. A bookmark's position is
//     a resume point on any replica whose change logs still reach it, or
//     for which kube-apiserver shows that the types its logs do not reach
//     have not changed since (bulk.Progress); otherwise ERROR 410, and
//     the client opens the view again.
//   - Order, within a batch: what a pod uses enters before the pod and
//     leaves after it; a namespace's services before the node's first pod
//     in it, and after its last; a volume's secrets before the volume,
//     the volume before its claim, and the reverse on the way out. The initial
//     state is sent in types order, which is the same rule. A pod change
//     that uses an object the cache lacks, in a type whose store has not
//     reached the pod's version, waits for it (at most referenceWait):
//     the stores follow separate watches and may trail each other.
//   - Nothing of the graph's kinds is sent, and no pod, unless the live
//     graph lets the node reach it when it is sent: the graph takes in
//     a change before the store publishes it, so a view that has not yet
//     taken in a change the graph has withholds what the change takes
//     away, and takes it out when the change arrives (its next step).
//   - A progress request is answered by a bookmark whose position is at
//     or past every store's version when the request came, sent once the
//     view has taken in every change up to there (progress_requests.go);
//     a view's requests are answered in order, one bookmark, with the
//     latest token, answering all those it reaches.
//   - LEFT carries an object's identity, never its state.
//   - One goroutine for every view; a view costs no goroutine. Objects
//     several views send are encoded once per version by the cache's
//     encoder, whatever the number of views that send them; what one view
//     alone sends (its pods, its Node) is encoded for it and not kept,
//     in the encoding its client asked for; a pod the cache keeps as
//     protobuf goes to a protobuf view as its bytes, not encoded.
//   - A view's references of a pod come from its spec and name alone:
//     a version whose spec bytes the cache shares with the one the view
//     holds (a status write) keeps the paths it had, undecoded.
//   - A view keeps identities and counts, never objects or bytes of its
//     own: its pods and volumes are the cache's objects, at the version it
//     took in, and what it reaches of the graph's kinds is its entries in
//     the one index of what views reach (reachindex.go), which also
//     routes those objects' changes.
//   - Step is the whole of a round and takes no other lock than Views.mu,
//     besides the inboxes' (views closed, progress requests), held for a
//     swap, which other goroutines put into without waiting for a step:
//     tests drive it directly, with hand-fed stores, one step at a time.
package nodeview
