package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// hollowNode is one node of a side: its kubelet, its kube-proxy when the
// scenario runs one, and its endpoint when fronted, which both then
// reach the API through.
type hollowNode struct {
	name     string
	kubelet  *controlplane.HollowKubelet
	proxy    *controlplane.HollowProxy
	endpoint *controlplane.NodeEndpoint
}

// hollowNodeSpec is how a hollowNode runs.
type hollowNodeSpec struct {
	// dir receives the node's credentials, kubeconfigs and logs.
	dir string
	// fronted puts the node's clients behind an endpoint of its own,
	// with the hub in front of kube-apiserver.
	fronted bool
	// proxy adds a hollow proxy with a ServiceAccount token of its own,
	// as kubeadm runs kube-proxy; the caller has bound it
	// (controlplane.EnsureKubeProxyRBAC, and the kube-proxy component's
	// nodeproxy:bulk-clients when fronted).
	proxy bool
	// labels are the Node's, set by its kubelet at registration.
	labels map[string]string
	// endpointArgs are added to the endpoint's command line, such as
	// --node-view=false.
	endpointArgs []string
}

// start starts the node's processes, its endpoint first, and returns
// once its Node is Ready and its proxy, if any, has synced. On error
// what started is left for stop, so that a caller stops every node the
// same way.
func (n *hollowNode) start(ctx context.Context, t Target, admin kubernetes.Interface, kubemark string, spec hollowNodeSpec) error {
	cp := t.Local.ControlPlane
	if err := os.MkdirAll(spec.dir, 0o700); err != nil {
		return fmt.Errorf("node %s: %w", n.name, err)
	}
	// The proxy verifies an endpoint as it verifies kube-apiserver: the
	// harness signs both serving certificates with one CA.
	server := cp.APIServerTarget()
	var kubeconfig string
	var err error
	if spec.fronted {
		command := append(slices.Clone(t.Local.NodeEndpoint), spec.endpointArgs...)
		if n.endpoint, err = cp.StartNodeEndpoint(ctx, command, n.name, spec.dir, t.Local.Hub.URL); err != nil {
			return err
		}
		kubeconfig, server.URL = n.endpoint.KubeletKubeconfig, n.endpoint.URL
	} else if kubeconfig, err = cp.NodeKubeconfig(n.name, spec.dir); err != nil {
		return err
	}
	n.kubelet, err = controlplane.StartHollowKubelet(ctx, kubemark, controlplane.HollowKubeletOptions{
		Name: n.name, Kubeconfig: kubeconfig, Dir: spec.dir, NodeLabels: spec.labels,
	})
	if err != nil {
		return err
	}
	if err := n.kubelet.WaitNodeReady(ctx, admin); err != nil {
		return err
	}
	if !spec.proxy {
		return nil
	}
	proxyConfig := filepath.Join(spec.dir, "kube-proxy.kubeconfig")
	if err := cp.ServiceAccountKubeconfig(ctx, controlplane.KubeProxyNamespace, controlplane.KubeProxyServiceAccount, server, proxyConfig); err != nil {
		return fmt.Errorf("kube-proxy of %s: %w", n.name, err)
	}
	if n.proxy, err = controlplane.StartHollowProxy(kubemark, controlplane.HollowProxyOptions{Name: n.name, Kubeconfig: proxyConfig, Dir: spec.dir}); err != nil {
		return err
	}
	return n.proxy.WaitSynced(ctx)
}

// stop ends the node's processes, its clients before their endpoint.
func (n *hollowNode) stop() {
	if n.proxy != nil {
		n.proxy.Stop()
	}
	if n.kubelet != nil {
		n.kubelet.Stop()
	}
	if n.endpoint != nil {
		n.endpoint.Process.Stop()
	}
}

// endpointUsage reads every node endpoint's usage; none when the nodes
// have no endpoints.
func endpointUsage(nodes []*hollowNode) ([]Usage, error) {
	var out []Usage
	for _, n := range nodes {
		if n.endpoint == nil {
			continue
		}
		u, err := ReadUsage(n.endpoint.Process.Pid())
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

// startHollowNodes fills nodes with hollow nodes named <ns>-<i>, each
// started as spec says in a directory of its own under dir and labelled
// for the run, at most four at a time (each start is a burst of CPU, on
// 2 cores), counting each on bar.
func startHollowNodes(ctx context.Context, t Target, admin kubernetes.Interface, kubemark, dir, ns string, nodes []*hollowNode, spec hollowNodeSpec, bar Counter) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for i := range nodes {
		name := fmt.Sprintf("%s-%d", ns, i)
		n := &hollowNode{name: name}
		nodes[i] = n
		spec := spec
		spec.dir, spec.labels = filepath.Join(dir, name), map[string]string{benchLabel: ns}
		g.Go(func() error {
			defer bar.Add(1)
			return n.start(gctx, t, admin, kubemark, spec)
		})
	}
	return g.Wait()
}
