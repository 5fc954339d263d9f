// Package podapi is the Kubelet Pod API of the node endpoint (`nodeproxy
// node --pod-api`): root on the node creates and deletes pods with no API
// server; the kubelet runs them through its HTTP pod source; they are
// handed to kube-apiserver once there is one.
//
//	root --unix socket--> Handler (POST/GET/DELETE /pods)
//	                         | admit: nodeproxy-node-podadmit, a process per POST
//	                         |        (podapi/admission: v1 defaulting, ValidatePodCreate
//	                         |        linked, static pod rules, the Pod API's own)
//	                         v
//	                       Store (one file a pod, written atomically)
//	                         |                 ^                ^
//	kubelet --GET /pods--> SourceHandler       | runHandover    | runKubeletWatch
//	        (bearer token)   (Local, HandoverFailed)  (kube-apiserver)  (kubelet PodResources)
//
// Invariants:
//   - A pod is stored whole, after every check, or not at all; a stored
//     pod survives restarts of the endpoint and of the node.
//   - The kubelet is served exactly the pods in a served state; a pod
//     leaves that set (HandingOver, Quarantined) before anything else
//     acts on its absence, and fetchSeq/fetchDone tell when the kubelet
//     has fetched a list without it.
//   - State changes are read-modify-writes under the store's lock
//     (Store.Modify): the handover loop and the kubelet's watch never
//     overwrite each other's decisions.
//   - No decision is taken on an error: kube-apiserver unreachable leaves
//     a pod where it is; the kubelet's PodResources unreachable quarantines
//     nothing.
package podapi
