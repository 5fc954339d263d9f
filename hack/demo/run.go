package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
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
		// the authorization-webhook overlay's authorization-config.yaml as shipped:
		// nodeproxy's webhook for system:nodes, then RBAC.
		AuthorizationFor: controlplane.WebhookAuthorization(filepath.FromSlash(controlplane.AuthorizationConfigManifest),
			url+"/authorize", "kube-apiserver-nodeproxy-webhook", true),
	})
	if err != nil {
		return err
	}
	defer func() {
		step("Stopping nodeproxy, kube-apiserver and etcd")
		cp.Stop()
	}()

	step("Starting nodeproxy serve as the nodeproxy ServiceAccount, with its RBAC from manifests/")
	np, err := cp.StartNodeproxy(ctx, o.nodeproxy, ports[0])
	if err != nil {
		return err
	}
	defer np.Process.Stop()
	files, admin := np.Files, np.Admin

	step("Registering bulk.k8s.io/v1alpha1 with kube-apiserver's aggregator (manifests/apiservice.yaml)")
	if err := cp.RegisterAPIService(ctx, filepath.Join("manifests", "base", "apiservice.yaml"), ports[0]); err != nil {
		return err
	}

	step("Seeding a sample workload: three nodes, pods that use a Secret and ConfigMaps")
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
	fmt.Println("    node-c runs nothing yet")

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

	step("Kubelets' bulk watches: one websocket per node, a channel per object, closed when access is lost")
	if err := showBulkWatch(ctx, cp, kube); err != nil {
		return err
	}

	if o.kubelets {
		step("Real kubelet code (hollow kubelets), two behind nodeproxy node endpoints, one straight on kube-apiserver (--kubelets=false skips this)")
		if err := showKubelets(ctx, cp, np, o.nodeproxy, kube); err != nil {
			return err
		}
	}

	if o.podAPI {
		step("The Pod API: a pod on a node with no API server, handed over once kube-apiserver is up (--pod-api=false skips this)")
		if err := showPodAPI(ctx, cp, np, o.nodeproxy, kube); err != nil {
			return err
		}
	}

	if o.compare {
		s := o.shape
		step("kube-apiserver's watches and nodeproxy's side by side: %d nodes x %d watches (--compare=false skips this)", s.Nodes, s.SecretsPerNode+1)
		if err := showComparison(ctx, cp, np, s); err != nil {
			return err
		}
	}

	step("Look around (the files are removed when the demo stops)")
	fmt.Printf(`    nodeproxy:       %[1]s   (log: %[2]s)
    kube-apiserver:  %[3]s   (logs in %[4]s)

    curl --cacert %[5]s --cert %[6]s --key %[7]s %[1]s/metrics | grep ^nodeproxy_
    curl --cacert %[5]s %[1]s/readyz?verbose
    kubectl --kubeconfig %[8]s get pods -A -o wide
    kubectl --kubeconfig %[8]s create -o yaml -f docs/examples/bulkget.yaml
`, url, filepath.Join(cp.Dir, "nodeproxy.log"), cp.URL, cp.Dir, files.CA, files.AdminCert, files.AdminKey, files.AdminKubeconfig)
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
