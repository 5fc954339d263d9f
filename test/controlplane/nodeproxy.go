package controlplane

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
)

// NodeproxyManifests are the files of manifests/base/ a nodeproxy process needs
// from kube-apiserver: its identity, and the RBAC for delegated
// authentication and authorization, its cache's watches, the webhook and
// the bulk API.
var NodeproxyManifests = []string{"namespace.yaml", "serviceaccount.yaml", "rbac-delegation.yaml", "rbac-informers.yaml", "rbac-webhook.yaml", "rbac-bulk.yaml"}

// Nodeproxy is a `nodeproxy serve` process in front of a control plane,
// serving on 127.0.0.1 with a certificate from the control plane's
// ServingCA.
type Nodeproxy struct {
	// URL is https://127.0.0.1:<Port>.
	URL     string
	Port    int
	Process *Process
	// Files are the credentials written for it and for a person trying
	// it, in the control plane's directory.
	Files NodeproxyFiles
	// Admin is an HTTPS client of a system:masters member that trusts
	// the serving certificate.
	Admin *http.Client
	cp    *ControlPlane
	// bin and args started it; StartReplica starts more of the same.
	bin  string
	args []string
}

// NodeproxyFiles are paths of PEM files and kubeconfigs.
type NodeproxyFiles struct {
	CA                      string
	ServingCert, ServingKey string
	AdminCert, AdminKey     string
	AdminKubeconfig         string
	// NodeproxyKubeconfig is what nodeproxy runs with: a client
	// certificate named as its ServiceAccount, which RBAC treats as that
	// ServiceAccount.
	NodeproxyKubeconfig string
}

// StartNodeproxy applies NodeproxyManifests from the repository's
// manifests/base/, starts bin serve on port with args appended, and returns
// once its /readyz answers 200 (its cache has synced). The caller stops
// the process.
func (cp *ControlPlane) StartNodeproxy(ctx context.Context, bin string, port int, args ...string) (*Nodeproxy, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	manifests := make([]string, len(NodeproxyManifests))
	for i, m := range NodeproxyManifests {
		manifests[i] = filepath.Join(root, "manifests", "base", m)
	}
	if err := cp.ApplyFiles(ctx, manifests...); err != nil {
		return nil, err
	}
	files, err := cp.writeNodeproxyFiles()
	if err != nil {
		return nil, err
	}
	return cp.startNodeproxy(ctx, bin, port, "nodeproxy", *files, args)
}

// StartReplica starts another `nodeproxy serve` beside np, as a second
// pod of the Deployment: the same binary, identity and arguments, on port,
// with a serving certificate of its own (also for 127.0.0.1 and
// localhost) and its log in <name>.log. Starting one under the name of a
// replica that was stopped replaces it, as a rollout does. The caller
// stops the process.
func (np *Nodeproxy) StartReplica(ctx context.Context, port int, name string) (*Nodeproxy, error) {
	return np.StartReplicaWith(ctx, port, name)
}

// StartReplicaWith is StartReplica with args appended to np's: what one
// replica has and its peers do not (a sharded replica's own name).
func (np *Nodeproxy) StartReplicaWith(ctx context.Context, port int, name string, args ...string) (*Nodeproxy, error) {
	return np.StartReplicaNamed(ctx, port, name, nil, args...)
}

// StartReplicaNamed is StartReplicaWith whose serving certificate also
// covers dnsNames (a sharded replica's stable name, where a redirect
// sends a node).
func (np *Nodeproxy) StartReplicaNamed(ctx context.Context, port int, name string, dnsNames []string, args ...string) (*Nodeproxy, error) {
	files := np.Files
	serving, err := np.cp.HubCA.ServingCert(np.cp.Dir, name+"-serving", append([]string{LocalServiceName("nodeproxy", "nodeproxy")}, dnsNames...)...)
	if err != nil {
		return nil, err
	}
	files.ServingCert, files.ServingKey = serving.CertPath, serving.KeyPath
	return np.cp.startNodeproxy(ctx, np.bin, port, name, files, append(slices.Clone(np.args), args...))
}

func (cp *ControlPlane) startNodeproxy(ctx context.Context, bin string, port int, name string, files NodeproxyFiles, args []string) (*Nodeproxy, error) {
	// A client of nodeproxy, not of kube-apiserver: only the TLS
	// settings of this configuration are used.
	admin, err := rest.HTTPClientFor(&rest.Config{Timeout: 10 * time.Second, TLSClientConfig: rest.TLSClientConfig{
		CAFile: files.CA, CertFile: files.AdminCert, KeyFile: files.AdminKey,
	}})
	if err != nil {
		return nil, fmt.Errorf("admin client of nodeproxy: %w", err)
	}
	np := &Nodeproxy{URL: "https://127.0.0.1:" + strconv.Itoa(port), Port: port, Files: files, Admin: admin, cp: cp, bin: bin, args: args}
	np.Process, err = StartProcess(name, bin, append([]string{
		"serve",
		"--kubeconfig=" + files.NodeproxyKubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + files.ServingCert,
		"--tls-private-key-file=" + files.ServingKey,
	}, args...), filepath.Join(cp.Dir, name+".log"))
	if err != nil {
		return nil, err
	}
	if err := WaitReady(ctx, np.Process, admin, np.URL+"/readyz"); err != nil {
		np.Process.Stop()
		return nil, err
	}
	return np, nil
}

// NodeConfig returns a client configuration for node's kubelet talking to
// nodeproxy directly, over mTLS with a certificate from the control
// plane's ClientCA (which nodeproxy trusts through
// extension-apiserver-authentication).
func (np *Nodeproxy) NodeConfig(node string) (*rest.Config, error) {
	cfg, err := np.cp.NodeConfig(node)
	if err != nil {
		return nil, err
	}
	cfg.Host = np.URL
	return cfg, nil
}

func (cp *ControlPlane) writeNodeproxyFiles() (*NodeproxyFiles, error) {
	f := &NodeproxyFiles{CA: cp.ServingCA.CertPath}
	serving, err := cp.HubCA.ServingCert(cp.Dir, "nodeproxy-serving", LocalServiceName("nodeproxy", "nodeproxy"))
	if err != nil {
		return nil, err
	}
	f.ServingCert, f.ServingKey = serving.CertPath, serving.KeyPath
	admin, err := cp.ClientCA.ClientCert("nodeproxy-admin", []string{"system:masters"}, cp.Dir, "nodeproxy-admin")
	if err != nil {
		return nil, err
	}
	f.AdminCert, f.AdminKey = admin.CertPath, admin.KeyPath
	f.AdminKubeconfig = filepath.Join(cp.Dir, "admin.kubeconfig")
	if err := WriteKubeconfig(cp.AdminConfig(), f.AdminKubeconfig); err != nil {
		return nil, err
	}
	sa, err := cp.UserConfig("system:serviceaccount:nodeproxy:nodeproxy", "system:serviceaccounts", "system:serviceaccounts:nodeproxy")
	if err != nil {
		return nil, err
	}
	f.NodeproxyKubeconfig = filepath.Join(cp.Dir, "nodeproxy.kubeconfig")
	if err := WriteKubeconfig(sa, f.NodeproxyKubeconfig); err != nil {
		return nil, err
	}
	return f, nil
}

// BuildNodeproxy builds cmd/nodeproxy into dir and returns the binary's
// path: tests and benchmarks that run nodeproxy as its own process, as
// operators do, build it from the tree under test.
func BuildNodeproxy(ctx context.Context, dir string) (string, error) {
	return BuildCommand(ctx, dir, "nodeproxy")
}

// BuildCommand builds cmd/<name> of this repository into dir/<name> and
// returns the binary's path.
func BuildCommand(ctx context.Context, dir, name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/"+name)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", name, err, out)
	}
	return bin, nil
}
