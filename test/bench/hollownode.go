package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// HollowNode is one hollow node of a scenario, or of make demo: its
// kubelet, its kube-proxy when it runs one, and its endpoint when
// fronted, which both then reach the API through.
type HollowNode struct {
	Name     string
	Kubelet  *controlplane.HollowKubelet
	Proxy    *controlplane.HollowProxy
	Endpoint *controlplane.NodeEndpoint
}

// HollowNodeSpec is how a HollowNode runs.
type HollowNodeSpec struct {
	// Dir receives the node's credentials, kubeconfigs and logs.
	Dir string
	// Fronted puts the node's clients behind an endpoint of its own,
	// with the hub in front of kube-apiserver.
	Fronted bool
	// Proxy adds a hollow proxy with a ServiceAccount token of its own,
	// as kubeadm runs kube-proxy; the caller has bound it (GrantKubeProxy).
	Proxy bool
	// Labels are the Node's, set by its kubelet at registration.
	Labels map[string]string
	// EndpointArgs are added to the endpoint's command line, such as
	// --node-view=false.
	EndpointArgs []string
}

// Start starts the node's processes, its endpoint first, and returns
// once its Node is Ready and its proxy, if any, has synced. On error
// what started is left for Stop, so that a caller stops every node the
// same way.
func (n *HollowNode) Start(ctx context.Context, t Target, admin kubernetes.Interface, kubemark string, spec HollowNodeSpec) error {
	cp := t.Local.ControlPlane
	if err := os.MkdirAll(spec.Dir, 0o700); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	// The proxy verifies an endpoint as it verifies kube-apiserver: the
	// harness signs both serving certificates with one CA.
	server := cp.APIServerTarget()
	var kubeconfig string
	var err error
	if spec.Fronted {
		command := append(slices.Clone(t.Local.NodeEndpoint), spec.EndpointArgs...)
		if n.Endpoint, err = cp.StartNodeEndpoint(ctx, command, n.Name, spec.Dir, t.Local.Hub.URL); err != nil {
			return err
		}
		kubeconfig, server.URL = n.Endpoint.KubeletKubeconfig, n.Endpoint.URL
	} else if kubeconfig, err = cp.NodeKubeconfig(n.Name, spec.Dir); err != nil {
		return err
	}
	n.Kubelet, err = controlplane.StartHollowKubelet(ctx, kubemark, controlplane.HollowKubeletOptions{
		Name: n.Name, Kubeconfig: kubeconfig, Dir: spec.Dir, NodeLabels: spec.Labels,
	})
	if err != nil {
		return err
	}
	if err := n.Kubelet.WaitNodeReady(ctx, admin); err != nil {
		return err
	}
	if !spec.Proxy {
		return nil
	}
	proxyConfig := filepath.Join(spec.Dir, "kube-proxy.kubeconfig")
	if err := cp.ServiceAccountKubeconfig(ctx, controlplane.KubeProxyNamespace, controlplane.KubeProxyServiceAccount, server, proxyConfig); err != nil {
		return fmt.Errorf("kube-proxy of %s: %w", n.Name, err)
	}
	if n.Proxy, err = controlplane.StartHollowProxy(kubemark, controlplane.HollowProxyOptions{Name: n.Name, Kubeconfig: proxyConfig, Dir: spec.Dir}); err != nil {
		return err
	}
	return n.Proxy.WaitSynced(ctx)
}

// Stop ends the node's processes, its clients before their endpoint.
func (n *HollowNode) Stop() {
	if n.Proxy != nil {
		n.Proxy.Stop()
	}
	if n.Kubelet != nil {
		n.Kubelet.Stop()
	}
	if n.Endpoint != nil {
		n.Endpoint.Process.Stop()
	}
}

// endpointUsage reads every node endpoint's usage; none when the nodes
// have no endpoints.
func endpointUsage(nodes []*HollowNode) ([]Usage, error) {
	var out []Usage
	for _, n := range nodes {
		if n.Endpoint == nil {
			continue
		}
		u, err := ReadUsage(n.Endpoint.Process.Pid())
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
func startHollowNodes(ctx context.Context, t Target, admin kubernetes.Interface, kubemark, dir, ns string, nodes []*HollowNode, spec HollowNodeSpec, bar Counter) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for i := range nodes {
		name := fmt.Sprintf("%s-%d", ns, i)
		n := &HollowNode{Name: name}
		nodes[i] = n
		spec := spec
		spec.Dir, spec.Labels = filepath.Join(dir, name), map[string]string{benchLabel: ns}
		g.Go(func() error {
			defer bar.Add(1)
			return n.Start(gctx, t, admin, kubemark, spec)
		})
	}
	return g.Wait()
}

// hollowRun is what a run of hollow nodes begins with: the kubemark
// binary, an admin client, the run's name (prefix and a random tail) and
// a directory of its own for the nodes' files, which the caller removes.
func hollowRun(ctx context.Context, env *Env, t Target, prefix string) (kubemark string, admin kubernetes.Interface, run, dir string, err error) {
	tools, err := controlplane.EnsureTools(ctx, env.Progress, "kubemark")
	if err != nil {
		return "", nil, "", "", err
	}
	if admin, err = kubernetes.NewForConfig(t.Admin); err != nil {
		return "", nil, "", "", err
	}
	run = prefix + "-" + rand.String(6)
	if dir, err = os.MkdirTemp("", run+"-"); err != nil {
		return "", nil, "", "", err
	}
	return tools["kubemark"], admin, run, dir, nil
}
