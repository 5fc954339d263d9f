package controlplane

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// AdminConfig returns a client configuration for a member of system:masters.
func (cp *ControlPlane) AdminConfig() *rest.Config {
	return rest.CopyConfig(cp.admin)
}

// UserConfig returns a client configuration that authenticates to
// kube-apiserver as user in groups, with a certificate signed by ClientCA.
func (cp *ControlPlane) UserConfig(user string, groups ...string) (*rest.Config, error) {
	kp, err := cp.ClientCA.ClientCert(user, groups, "", "")
	if err != nil {
		return nil, err
	}
	return cp.configFor(kp), nil
}

// NodeConfig returns a client configuration for the kubelet of node: user
// system:node:<node> in group system:nodes, as the Node authorizer expects.
func (cp *ControlPlane) NodeConfig(node string) (*rest.Config, error) {
	return cp.UserConfig("system:node:"+node, "system:nodes")
}

func (cp *ControlPlane) configFor(kp *KeyPair) *rest.Config {
	return &rest.Config{
		Host: cp.URL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   certPEM(cp.ServingCA.Cert.Raw),
			CertData: kp.CertPEM,
			KeyData:  kp.KeyPEM,
		},
		// Tests create objects in bursts; client-go's default of 5 QPS would
		// make them wait on the client instead of on the server under test.
		QPS:   1000,
		Burst: 2000,
	}
}

// WriteKubeconfig writes cfg's server and credentials, inline or as file
// paths, to a kubeconfig file at path: the form that programs such as
// `nodeproxy serve`, kubectl and the kubelet take.
func WriteKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	// Inline data wins over a file, as in client-go; a kubeconfig that
	// named both would be refused.
	ifNoData := func(path string, data []byte) string {
		if len(data) > 0 {
			return ""
		}
		return path
	}
	kc.Clusters["nodeproxy"] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthority:     ifNoData(cfg.CAFile, cfg.CAData),
		CertificateAuthorityData: cfg.CAData,
	}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{
		ClientCertificate:     ifNoData(cfg.CertFile, cfg.CertData),
		ClientKey:             ifNoData(cfg.KeyFile, cfg.KeyData),
		ClientCertificateData: cfg.CertData,
		ClientKeyData:         cfg.KeyData,
		Token:                 cfg.BearerToken,
	}
	kc.Contexts["nodeproxy"] = &clientcmdapi.Context{Cluster: "nodeproxy", AuthInfo: "user"}
	kc.CurrentContext = "nodeproxy"
	// WriteToFile creates the file readable by its owner only: it holds a key.
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}
