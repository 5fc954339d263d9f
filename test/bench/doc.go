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
//
// CompareKubelets is the kubelets scenario cut to what make demo can
// wait for: the same number of hollow kubelets with the same pods and
// objects, behind node endpoints then straight on kube-apiserver, each
// measured over one window of fixed length from its pods' creation (the
// long-running requests they hold on kube-apiserver, the servers' and
// endpoints' CPU, the time to every pod Running with its files).
//
// The nodeview scenario runs hollow kubelets behind node endpoints, first
// each with a hub channel per kubelet reflector (--node-view=false), then
// each with its copy of the node's view, and measures the hub's channels
// and heap per node; a kubelet restart, counting the reads that leave the
// node by the path that answered them; and an outage of kube-apiserver and
// the hub (both processes stopped, etcd kept), during which a third of the
// kubelets restart and must run their pods from the copies, and after
// which every node's copy must equal kube-apiserver's, each change seen
// once.
package bench
