package controlplane

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"

	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/client-go/rest"
)

// PeerAPIServer is one more kube-apiserver on the control plane's etcd, as
// the replicas of an HA control plane are: the same certificates,
// service-account keys and etcd, its own port, watch cache and
// authorization configuration. Each has its own view of the cluster a
// moment behind etcd, which is what the causal benchmark compares.
type PeerAPIServer struct {
	// URL is https://127.0.0.1:<port>.
	URL     string
	Process *Process
}

// StartPeerAPIServer starts a kube-apiserver named name (its log is
// kube-apiserver-<name>.log) with the authorization configuration authz
// returns (nil: Node then RBAC, as Start), and returns once it is ready.
// The caller stops it.
func (cp *ControlPlane) StartPeerAPIServer(ctx context.Context, name string, authz func(*ControlPlane) (*apiserverv1.AuthorizationConfiguration, error)) (*PeerAPIServer, error) {
	var (
		cfg *apiserverv1.AuthorizationConfiguration
		err error
	)
	if authz != nil {
		if cfg, err = authz(cp); err != nil {
			return nil, fmt.Errorf("authorization configuration of kube-apiserver %s: %w", name, err)
		}
	}
	authzPath, err := writeAuthorizationConfig(cp.Dir, "authorization-config-"+name+".yaml", cfg)
	if err != nil {
		return nil, err
	}
	ports, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	p := &PeerAPIServer{URL: "https://127.0.0.1:" + strconv.Itoa(ports[0])}
	args := cp.apiServerArgs(ports[0], authzPath, filepath.Join(cp.Dir, "apiserver-generated-"+name))
	p.Process, err = StartProcess("kube-apiserver "+name, cp.apiserverBin, args, filepath.Join(cp.Dir, "kube-apiserver-"+name+".log"))
	if err != nil {
		return nil, err
	}
	client, err := rest.HTTPClientFor(p.Config(cp.admin))
	if err != nil {
		p.Process.Stop()
		return nil, fmt.Errorf("admin client of kube-apiserver %s: %w", name, err)
	}
	if err := WaitReady(ctx, p.Process, client, p.URL+"/readyz"); err != nil {
		p.Process.Stop()
		return nil, err
	}
	return p, nil
}

// Config returns a copy of cfg (a client configuration of this control
// plane) aimed at this kube-apiserver.
func (p *PeerAPIServer) Config(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Host = p.URL
	return c
}
