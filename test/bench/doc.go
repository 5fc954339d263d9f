// Package bench holds nodeproxy's benchmark scenarios that need whole
// processes: a real kube-apiserver and etcd, and nodeproxy serving as its
// own program, measured from outside through /proc and /metrics, the way
// an operator would see them.
//
// CompareWatches is the status quo side by side with nodeproxy: the same
// simulated kubelets watch the same secrets, once as one watch per object
// on kube-apiserver (what a kubelet does today, authorized by the Node
// authorizer), once as one websocket per node to nodeproxy with a channel
// per object (authorized by nodeproxy's graph). It reports, for each
// server, the CPU seconds spent opening the watches, idling with them and
// delivering a burst of updates, its resident memory and goroutines with
// the watches open, and the watch count kube-apiserver carries.
package bench
