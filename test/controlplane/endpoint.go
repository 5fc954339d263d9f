package controlplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
)

// NodeEndpoint is a `nodeproxy node` process standing for one node, laid
// out as on a real node: the kubelet's client certificate and key in one
// file (kubelet-client-current.pem), the kubelet's direct kubeconfig
// naming it, and the kubeconfig the kubelet uses instead, pointing at the
// endpoint.
type NodeEndpoint struct {
	Node string
	// URL is https://127.0.0.1:<port>.
	URL     string
	Process *Process
	// KubeletKubeconfig is what the kubelet runs with: the endpoint, its
	// serving CA, and the kubelet's certificate file.
	KubeletKubeconfig string
	// DirectKubeconfig is the kubelet's kubeconfig to kube-apiserver,
	// which the endpoint reaches it with.
	DirectKubeconfig string
}

// NodeEndpointCommand is how bin runs the node endpoint: nodeproxy-node
// is the endpoint alone, nodeproxy runs it as its node command.
func NodeEndpointCommand(bin string) []string {
	if filepath.Base(bin) == "nodeproxy-node" {
		return []string{bin}
	}
	return []string{bin, "node"}
}

// LeanNodeEndpointCommand is NodeEndpointCommand of the nodeproxy-node
// binary beside nodeproxy's bin when there is one (make build makes
// both), else of bin itself.
func LeanNodeEndpointCommand(bin string) []string {
	lean := filepath.Join(filepath.Dir(bin), "nodeproxy-node")
	if exists(lean) {
		return NodeEndpointCommand(lean)
	}
	return NodeEndpointCommand(bin)
}

// StartNodeEndpoint writes node's kubelet credentials into dir, runs
// command (see NodeEndpointCommand) in front of the control plane, with
// the hub at hubURL ("" for none), and returns once its /readyz answers
// 200.
func (cp *ControlPlane) StartNodeEndpoint(ctx context.Context, command []string, node, dir, hubURL string) (*NodeEndpoint, error) {
	if len(command) == 0 {
		return nil, fmt.Errorf("endpoint of %s: no command", node)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("endpoint of %s: %w", node, err)
	}
	kp, err := cp.ClientCA.ClientCert("system:node:"+node, []string{"system:nodes"}, "", "")
	if err != nil {
		return nil, err
	}
	pem := filepath.Join(dir, "kubelet-client-current.pem")
	if err := os.WriteFile(pem, append(kp.CertPEM, kp.KeyPEM...), 0o600); err != nil {
		return nil, fmt.Errorf("endpoint of %s: %w", node, err)
	}
	serving, err := cp.ServingCA.ServingCert(dir, "endpoint-serving")
	if err != nil {
		return nil, err
	}
	ports, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	e := &NodeEndpoint{
		Node:              node,
		URL:               "https://127.0.0.1:" + strconv.Itoa(ports[0]),
		DirectKubeconfig:  filepath.Join(dir, "kubelet-direct.conf"),
		KubeletKubeconfig: filepath.Join(dir, "kubelet.conf"),
	}
	asKubelet := func(host string) *rest.Config {
		return &rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{CAFile: cp.ServingCA.CertPath, CertFile: pem, KeyFile: pem}}
	}
	if err := WriteKubeconfig(asKubelet(cp.URL), e.DirectKubeconfig); err != nil {
		return nil, err
	}
	if err := WriteKubeconfig(asKubelet(e.URL), e.KubeletKubeconfig); err != nil {
		return nil, err
	}
	args := append(command[1:len(command):len(command)],
		"--node-name="+node,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(ports[0]),
		"--tls-cert-file="+serving.CertPath,
		"--tls-private-key-file="+serving.KeyPath,
		"--client-ca-file="+cp.ClientCA.CertPath,
		"--kubeconfig="+e.DirectKubeconfig,
		"--hub-url="+hubURL,
		// Each endpoint's copy of its node's view in its own directory:
		// the default is one per machine, and this machine runs many.
		"--node-view-dir="+filepath.Join(dir, "node-view"),
	)
	if hubURL != "" {
		// The hub's own CA, which StartNodeproxy's hubs are signed by.
		args = append(args, "--hub-ca-file="+cp.HubCA.CertPath)
	}
	if e.Process, err = StartProcess("endpoint of "+node, command[0], args, filepath.Join(dir, "endpoint.log")); err != nil {
		return nil, err
	}
	client, err := rest.HTTPClientFor(&rest.Config{Timeout: 5 * time.Second, TLSClientConfig: rest.TLSClientConfig{CAFile: cp.ServingCA.CertPath}})
	if err != nil {
		e.Process.Stop()
		return nil, err
	}
	if err := WaitReady(ctx, e.Process, client, e.URL+"/readyz"); err != nil {
		e.Process.Stop()
		return nil, err
	}
	return e, nil
}
