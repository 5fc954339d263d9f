// Package endpoint is `nodeproxy node`: the node-local endpoint that an
// unmodified kubelet uses in place of kube-apiserver.
//
// The kubelet reads the Secrets and ConfigMaps of its pods through one
// watch per object on kube-apiserver. The endpoint turns those watches
// into channels of one bulk watch websocket to the hub (`nodeproxy
// serve`), so that kube-apiserver carries none of them, and passes every
// other request through to kube-apiserver unchanged.
//
// # Who may call
//
// Only the node it stands for: a client certificate chained to the
// cluster's client CA naming system:node:<node> in system:nodes, which is
// what the kubelet presents. No certificate is 401; any other identity,
// an administrator's included, is 403. There is no plain-HTTP port: on a
// node, any local process could otherwise act as the node. /livez and
// /readyz are open; /metrics is the node's.
//
// # What the hub serves
//
// hubRoute decides, with kube-apiserver's own request parser:
//
//	GET secrets, configmaps     get, list, watch in a namespace
//	GET pods                    list, watch with spec.nodeName=<node>
//	GET nodes                   list, watch with metadata.name=<node>
//
// Lists and gets are bulk gets (one operation each); watches are channels
// whose selector carries the watch's options, streaming lists included
// (sendInitialEvents, ending with the k8s.io/initial-events-end
// bookmark). Anything else goes to kube-apiserver.
//
// # The node's Lease
//
// The Lease stays out of the node's view. The endpoint remembers it from
// kube-apiserver's answers to the kubelet's own writes of it and answers
// the kubelet's get of it from that memory (lease.go), forgetting it on
// any write that fails: a renewal at the version the get returned then
// conflicts with anyone else's write, and the next get goes to
// kube-apiserver.
//
// # When the hub cannot answer
//
// The hub connection is a watchmux.Session kept by Hub.Run: when a hub
// replica goes, the session dials the hub's address again, landing on
// another replica, and carries each kubelet watch over from the last
// resourceVersion the kubelet was sent; the kubelet's watch does not
// end. A watch no replica takes back within hubResumeTimeout ends
// cleanly. While no connection is up, or when the hub fails a request
// for any reason but a decision kube-apiserver would make alike (403,
// 410), the request goes to kube-apiserver: the kubelet sees at
// most a watch restart. Proxied watches of hub-served types are ended
// when the hub returns, so that they come back to it. Both sides count
// in etcd's revisions, so a watch resumed on either side from the last
// resourceVersion loses nothing.
//
// # Identity upstream
//
// The endpoint reaches kube-apiserver and the hub with the kubelet's own
// client certificate file (kubelet-client-current.pem), which client-go
// re-reads and, on rotation, closes the connections made with the old
// one. kube-apiserver's authorization and admission see the node.
//
// # Whom it trusts as the hub
//
// Only a certificate of the hub's own CA (--hub-ca-file, required with
// --hub-url). A CA of the cluster is refused at start (checkHubCA): on
// kubeadm clusters it signs kubelet serving certificates for names the
// node chooses, so a node could pose as the hub. Through the aggregator,
// kube-apiserver is verified with the kubeconfig's CA, and verifies the
// hub with the APIService's caBundle.
//
// See docs/architecture.md for why the endpoint does not embed
// k8s.io/apiserver's REST storage.
package endpoint
