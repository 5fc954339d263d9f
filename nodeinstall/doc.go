// Package nodeinstall puts the node endpoint (`nodeproxy node`) in front
// of a node's kubelet, and takes it away, by writing files on the host.
//
// A DaemonSet pod cannot front the kubelet by itself: after a reboot the
// kubelet would need the endpoint to learn about the endpoint's own pod.
// So the DaemonSet only installs; what runs is a static pod, which the
// kubelet starts from its manifest directory with no API server at all:
//
//	/etc/kubernetes/manifests/nodeproxy-node.yaml   the endpoint, as a static pod
//	/etc/kubernetes/kubelet-direct.conf             the kubelet's own kubeconfig, kept
//	/etc/kubernetes/kubelet.conf                    rewritten: server https://127.0.0.1:<port>,
//	                                                the endpoint's CA, the same user
//	/var/lib/nodeproxy/pki/ca.crt                   the endpoint's CA, made by the endpoint
//
// Install writes the static pod, waits until the endpoint answers
// /readyz, and only then points the kubelet at it and restarts the
// kubelet; a kubelet is never pointed at an endpoint that is not
// serving. On a reboot the kubelet starts the static pod from its
// manifest and reaches kube-apiserver as soon as the endpoint is up; the
// endpoint itself reaches kube-apiserver through kubelet-direct.conf, so
// neither waits for the other.
//
// Reconcile keeps that true: if the endpoint stops answering for longer
// than a grace period while the kubelet depends on it (its image gone,
// a crash loop), the kubelet's direct kubeconfig is put back and the
// kubelet restarted, so the node returns without a person; once the
// endpoint answers again, the kubelet is pointed at it again. Uninstall
// restores the kubelet's own kubeconfig byte for byte, restarts the
// kubelet, and removes the static pod.
package nodeinstall
