// Package hub is nodeproxy's hub, `nodeproxy serve`: the per-cluster
// replica that node endpoints and other clients connect to. It wires
// k8s.io/apiserver's secure serving with delegated authentication and
// authorization, the shared informers of package cache, and the health and
// metrics endpoints.
//
// It follows the shape of k8s.io/apiserver servers such as metrics-server:
//
//	flags -> Options -> Complete -> Validate -> Config -> New -> Server.Run
//
// Options holds what flags fill; Complete fills defaults that depend on
// other options; Validate returns every problem at once; Config turns the
// options into what Run needs (and checks that kube-apiserver answers, so a
// wrong kubeconfig fails before the server starts instead of hanging it);
// New builds the server; Run serves until its context ends, then drains.
//
// Besides the cache's informers it runs its own on RBAC (rbacchanges.go),
// which only tell the bulk watch whose open channels to authorize again
// after a change; the answer is still kube-apiserver's.
//
// With --shard-service the replica is one of several that each hold a
// share of the nodes (docs/architecture.md, "Sharding"): Membership
// follows the replicas and makes the shard table, shardHolder keeps the
// cache holding the table's ranges, shardRouter sends a node to the
// replica that serves it (307) and moves its connection when that
// changes, and shardOwners tells the webhook which replicas hold a node
// it does not.
//
// Nothing here decides anything about nodes: the core (cache, graph,
// authorizer, watchmux) and the bulk API plug into the Server this package
// builds. The node endpoint (package endpoint) is the hub's client and
// shares none of this package.
package hub
