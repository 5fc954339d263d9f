package endpoint_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/endpoint"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// startHub runs `nodeproxy serve` in-process with the RBAC nodes need to
// use the bulk API, and waits until its cache has synced.
func startHub(t *testing.T) *testserver.Server {
	t.Helper()
	return startHubOn(t, 0)
}

// startHubOn is startHub on a given port (0: any), so that a test can
// stop the hub and start it again where the endpoints look for it.
func startHubOn(t *testing.T, port int) *testserver.Server {
	t.Helper()
	return startHubWith(t, testserver.Options{Port: port})
}

// startHubWith is startHub with opts (its port, its flags).
func startHubWith(t *testing.T, opts testserver.Options) *testserver.Server {
	t.Helper()
	testserver.InstallRBAC(t, cp, "rbac-webhook.yaml", "rbac-bulk.yaml")
	hub := testserver.Start(t, cp, opts)
	hub.WaitReady(t, 90*time.Second)
	return hub
}

// freePort returns a port nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}

// node is one simulated node: its kubelet's credentials on disk, as the
// kubelet keeps them, and its endpoint.
type node struct {
	name string
	// pem is the kubelet's client certificate and key in one file, the
	// form of /var/lib/kubelet/pki/kubelet-client-current.pem.
	pem string
	// kubelet reaches the endpoint as the kubelet does.
	kubelet *rest.Config
	// metrics is the endpoint's scrapers' address (RunMetrics).
	metrics string
	stop    func()
}

// startNode starts node's endpoint in front of the control plane, with
// the hub at hubURL ("" for none). The endpoint runs until the test ends.
func startNode(t *testing.T, name, hubURL string) *node {
	t.Helper()
	kp, err := cp.ClientCA.ClientCert("system:node:"+name, []string{"system:nodes"}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return startNodeWith(t, name, nodeSpec{hub: hubURL, kubelet: kp})
}

// nodeSpec is what startNodeWith may change of startNode's node.
type nodeSpec struct {
	// apiServer is kube-apiserver's address; empty: the control plane's.
	apiServer string
	// hub is the hub's address; empty: no hub.
	hub string
	// kubelet is the kubelet's certificate.
	kubelet *controlplane.KeyPair
	// hubCAFile, if set, is the endpoint's --hub-ca-file, and the
	// endpoint's configuration is made from its command line, as
	// `nodeproxy node` makes it (Options), not given: the hub is then
	// verified against this file alone.
	hubCAFile string
	// noView: the endpoint keeps no copy of the node's view, and serves
	// the kubelet's reads from hub channels, as the tests of that path
	// need.
	noView bool
	// viewDir persists the copy of the node's view; empty: not
	// persisted.
	viewDir string
	// jsonView: the endpoint asks for its view in JSON, as one of the
	// release before protobuf views did.
	jsonView bool
	// hubDial, if set, is how the endpoint reaches the hub's addresses:
	// sharded replicas by their stable names (testserver.Sharded).
	hubDial func(ctx context.Context, network, address string) (net.Conn, error)
}

// startNodeWith is startNode as spec says.
func startNodeWith(t *testing.T, name string, spec nodeSpec) *node {
	t.Helper()
	kp := spec.kubelet
	if spec.apiServer == "" {
		spec.apiServer = cp.URL
	}
	dir := t.TempDir()
	n := &node{name: name, pem: filepath.Join(dir, "kubelet-client-current.pem")}
	n.writeCert(t, kp)
	serving, err := cp.ServingCA.ServingCert(dir, "endpoint")
	if err != nil {
		t.Fatal(err)
	}
	asNode := func(host string) *rest.Config {
		return &rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{
			CAFile: cp.ServingCA.CertPath, CertFile: n.pem, KeyFile: n.pem,
		}}
	}
	cfg := endpoint.Config{
		NodeName:        name,
		APIServer:       asNode(spec.apiServer),
		ClientCAFile:    cp.ClientCA.CertPath,
		ServingCertFile: serving.CertPath,
		ServingKeyFile:  serving.KeyPath,
		NoNodeView:      spec.noView,
		NodeViewDir:     spec.viewDir,
	}
	if spec.hub != "" {
		cfg.Hub = asNode(spec.hub)
		cfg.Hub.Dial = spec.hubDial
	}
	if spec.hubCAFile != "" {
		cfg = configFromFlags(t, dir, cfg, spec.hub, spec.hubCAFile)
	}
	e, err := endpoint.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if spec.jsonView {
		endpoint.ViewInJSON(e)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n.metrics = "https://" + mln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- e.Run(ctx, ln) }()
	go func() { done <- e.RunMetrics(ctx, mln) }()
	var once sync.Once
	n.stop = func() {
		once.Do(func() {
			cancel()
			for range 2 {
				select {
				case err := <-done:
					if err != nil && !errors.Is(err, context.Canceled) {
						t.Errorf("endpoint of %s: %v", name, err)
					}
				case <-time.After(30 * time.Second):
					t.Errorf("endpoint of %s did not stop within 30s", name)
					return
				}
			}
		})
	}
	t.Cleanup(n.stop)
	servingCA, err := os.ReadFile(cp.ServingCA.CertPath)
	if err != nil {
		t.Fatal(err)
	}
	n.kubelet = &rest.Config{
		Host: "https://127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port),
		TLSClientConfig: rest.TLSClientConfig{
			// The kubelet's own file, which it rotates (writeCert).
			CAData: servingCA, CertFile: n.pem, KeyFile: n.pem,
		},
		// The kubelet's own client settings: protobuf first.
		ContentConfig: rest.ContentConfig{
			AcceptContentTypes: "application/vnd.kubernetes.protobuf,application/json",
			ContentType:        "application/vnd.kubernetes.protobuf",
		},
		QPS: 100, Burst: 200,
	}
	return n
}

// configFromFlags is the configuration `nodeproxy node` makes of the
// flags that say what cfg says, with --hub-url=hub and
// --hub-ca-file=hubCAFile.
func configFromFlags(t *testing.T, dir string, cfg endpoint.Config, hub, hubCAFile string) endpoint.Config {
	t.Helper()
	o := endpoint.NewOptions()
	o.NodeName, o.ClientCAFile = cfg.NodeName, cfg.ClientCAFile
	o.TLSCertFile, o.TLSKey = cfg.ServingCertFile, cfg.ServingKeyFile
	o.HubURL, o.HubCAFile = hub, hubCAFile
	o.Kubeconfig = filepath.Join(dir, "kubelet-direct.conf")
	if err := controlplane.WriteKubeconfig(cfg.APIServer, o.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	made, _, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	return made
}

// writeCert replaces the kubelet's certificate file, as the kubelet's
// rotation does: a new file renamed over the old one.
func (n *node) writeCert(t *testing.T, kp *controlplane.KeyPair) {
	t.Helper()
	tmp := n.pem + ".tmp"
	if err := os.WriteFile(tmp, append(kp.CertPEM, kp.KeyPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, n.pem); err != nil {
		t.Fatal(err)
	}
}

// inBetween starts, until the test ends, an HTTPS proxy in front of
// target (whose serving certificate roots verifies), as a load balancer
// or an old router between the endpoint and its peer would be. It serves
// with a certificate of the control plane's serving CA and re-originates
// TLS to target as kp. intercept sees each request first and returns
// true when it has answered it itself.
func inBetween(t *testing.T, target string, roots *x509.CertPool, kp *controlplane.KeyPair, intercept func(http.ResponseWriter, *http.Request) bool) string {
	t.Helper()
	serving, err := cp.ServingCA.ServingCert(t.TempDir(), "in-between")
	if err != nil {
		t.Fatal(err)
	}
	return inBetweenAs(t, serving, target, roots, kp, intercept)
}

// inBetweenAs is inBetween serving with the certificate serving.
func inBetweenAs(t *testing.T, serving *controlplane.KeyPair, target string, roots *x509.CertPool, kp *controlplane.KeyPair, intercept func(http.ResponseWriter, *http.Request) bool) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	client, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pass := httputil.NewSingleHostReverseProxy(u)
	pass.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{client}}}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !intercept(w, req) {
			pass.ServeHTTP(w, req)
		}
	}))
	pair, err := tls.X509KeyPair(serving.CertPEM, serving.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

// servingRoots is the pool of the control plane's serving CA, which
// verifies kube-apiserver.
func servingRoots(t *testing.T) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(cp.ServingCA.CertPath)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatal("no certificate in the serving CA file")
	}
	return roots
}

// get gets url, served with a certificate of the control plane's serving
// CA, with bearer (none if empty) and certs, and returns the status and
// body.
func get(t *testing.T, url, bearer string, certs ...tls.Certificate) (int, string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: servingRoots(t), Certificates: certs}}}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
