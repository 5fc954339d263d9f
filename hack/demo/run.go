package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/internal/controlplane"
)

func step(format string, args ...any) {
	fmt.Printf("\n==> "+format+"\n", args...)
}

func run(ctx context.Context, o demoOptions) error {
	started := time.Now()
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		return err
	}
	url := "https://127.0.0.1:" + strconv.Itoa(ports[0])
	step("Starting etcd and kube-apiserver on 127.0.0.1, nodeproxy as the authorizer of nodes")
	cp, err := controlplane.Start(ctx, controlplane.Options{
		Log: prefixed("    "),
		// manifests/kube-apiserver-authorization-config.yaml as shipped:
		// nodeproxy's webhook for system:nodes, then RBAC.
		AuthorizationFor: controlplane.WebhookAuthorization(filepath.Join("manifests", "kube-apiserver-authorization-config.yaml"),
			url+"/authorize", "kube-apiserver-nodeproxy-webhook", true),
	})
	if err != nil {
		return err
	}
	defer func() {
		step("Stopping nodeproxy, kube-apiserver and etcd")
		cp.Stop()
	}()

	step("Installing nodeproxy's namespace, ServiceAccount and RBAC from manifests/")
	manifests := []string{"namespace.yaml", "serviceaccount.yaml", "rbac-delegation.yaml", "rbac-informers.yaml", "rbac-webhook.yaml", "rbac-bulk.yaml"}
	for i, m := range manifests {
		manifests[i] = filepath.Join("manifests", m)
	}
	if err := cp.ApplyFiles(ctx, manifests...); err != nil {
		return err
	}

	files, err := writeCredentials(cp)
	if err != nil {
		return err
	}

	step("Starting nodeproxy serve as the nodeproxy ServiceAccount")
	np, err := controlplane.StartProcess("nodeproxy", o.nodeproxy, []string{
		"serve",
		"--kubeconfig=" + files.nodeproxyKubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--tls-cert-file=" + files.servingCert,
		"--tls-private-key-file=" + files.servingKey,
	}, filepath.Join(cp.Dir, "nodeproxy.log"))
	if err != nil {
		return err
	}
	defer np.Stop()
	admin, err := adminClient(files)
	if err != nil {
		return err
	}
	if err := controlplane.WaitReady(ctx, np, admin, url+"/readyz"); err != nil {
		return err
	}

	step("Registering bulk.k8s.io/v1alpha1 with kube-apiserver's aggregator (manifests/apiservice.yaml)")
	if err := cp.RegisterAPIService(ctx, filepath.Join("manifests", "apiservice.yaml"), ports[0]); err != nil {
		return err
	}

	step("Seeding a sample workload: two nodes, pods that use a Secret and ConfigMaps")
	kube, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	if err := cp.EnsureNamespace(ctx, demoNamespace); err != nil {
		return err
	}
	if err := seed(ctx, kube); err != nil {
		return err
	}
	fmt.Println("    node-a runs web-0 (secret db-password, configmap web-config)")
	fmt.Println("    node-b runs batch-0 (configmap batch-config)")

	step("Nodes asking kube-apiserver, which asks nodeproxy")
	if err := showNodeAccess(ctx, cp); err != nil {
		return err
	}

	step("A kubelet's bulk get, through kube-apiserver, answered from nodeproxy's cache")
	if err := showBulkGet(ctx, cp); err != nil {
		return err
	}

	step("nodeproxy's cache and decisions, as its /metrics tells (ready %s after start)", time.Since(started).Round(100*time.Millisecond))
	if err := printObjectCounts(ctx, admin, url, 5); err != nil {
		return err
	}

	step("Look around (the files are removed when the demo stops)")
	fmt.Printf(`    nodeproxy:       %[1]s   (log: %[2]s)
    kube-apiserver:  %[3]s   (logs in %[4]s)

    curl --cacert %[5]s --cert %[6]s --key %[7]s %[1]s/metrics | grep ^nodeproxy_
    curl --cacert %[5]s %[1]s/readyz?verbose
    kubectl --kubeconfig %[8]s get pods -A -o wide
    kubectl --kubeconfig %[8]s create -o yaml -f docs/examples/bulkget.yaml
`, url, filepath.Join(cp.Dir, "nodeproxy.log"), cp.URL, cp.Dir, files.ca, files.adminCert, files.adminKey, files.adminKubeconfig)
	var timeUp <-chan time.Time
	if o.duration > 0 {
		fmt.Printf("\n    Stopping by itself in %s.\n", o.duration)
		timeUp = time.After(o.duration)
	} else {
		fmt.Printf("\n    Press Ctrl-C to stop.\n")
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timeUp:
		return nil
	}
}

// credentials are the files the demo writes into the control plane's
// directory for nodeproxy and for the person trying it.
type credentials struct {
	ca                      string
	servingCert, servingKey string
	adminCert, adminKey     string
	adminKubeconfig         string
	nodeproxyKubeconfig     string
}

func writeCredentials(cp *controlplane.ControlPlane) (*credentials, error) {
	c := &credentials{ca: cp.ServingCA.CertPath}
	serving, err := cp.ServingCA.ServingCert(cp.Dir, "nodeproxy-serving")
	if err != nil {
		return nil, err
	}
	c.servingCert, c.servingKey = serving.CertPath, serving.KeyPath
	admin, err := cp.ClientCA.ClientCert("demo-admin", []string{"system:masters"}, cp.Dir, "demo-admin")
	if err != nil {
		return nil, err
	}
	c.adminCert, c.adminKey = admin.CertPath, admin.KeyPath
	c.adminKubeconfig = filepath.Join(cp.Dir, "admin.kubeconfig")
	if err := controlplane.WriteKubeconfig(cp.AdminConfig(), c.adminKubeconfig); err != nil {
		return nil, err
	}
	// A client certificate named as the ServiceAccount is, to RBAC, that
	// ServiceAccount: the manifests' bindings apply to it unchanged.
	sa, err := cp.UserConfig("system:serviceaccount:nodeproxy:nodeproxy", "system:serviceaccounts", "system:serviceaccounts:nodeproxy")
	if err != nil {
		return nil, err
	}
	c.nodeproxyKubeconfig = filepath.Join(cp.Dir, "nodeproxy.kubeconfig")
	if err := controlplane.WriteKubeconfig(sa, c.nodeproxyKubeconfig); err != nil {
		return nil, err
	}
	return c, nil
}

func adminClient(c *credentials) (*http.Client, error) {
	pair, err := tls.LoadX509KeyPair(c.adminCert, c.adminKey)
	if err != nil {
		return nil, fmt.Errorf("admin certificate: %w", err)
	}
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(c.ca)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", c.ca, err)
	}
	pool.AppendCertsFromPEM(ca)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}},
	}}, nil
}

// printObjectCounts prints nodeproxy_cache_objects from /metrics once
// the pod count shows the seeded pods, or after tries seconds.
func printObjectCounts(ctx context.Context, client *http.Client, url string, tries int) error {
	var lines []string
	for i := 0; i < tries; i++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("GET /metrics: %w", err)
		}
		lines = lines[:0]
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "nodeproxy_cache_objects{") || strings.HasPrefix(sc.Text(), "nodeproxy_authorizer_decisions_total{") ||
				strings.HasPrefix(sc.Text(), "nodeproxy_bulk_get_requests_total{") {
				lines = append(lines, sc.Text())
			}
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /metrics: %s", resp.Status)
		}
		if strings.Contains(strings.Join(lines, "\n"), `resource="pods"} 2`) {
			break
		}
		time.Sleep(time.Second)
	}
	for _, l := range lines {
		fmt.Println("    " + l)
	}
	return nil
}
