package endpoint_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestHollowKubeletsThroughAnOutage runs real kubelet code behind node
// endpoints that keep a copy of their node's view, and cuts the nodes off
// kube-apiserver and the hub. Meanwhile one kubelet restarts (a fresh
// root directory: its volumes are written again), and another node
// reboots (its endpoint restarts too, from the copy persisted on disk).
// Both get their pods Running with their files while the control plane is
// still out of reach. A secret changed during the outage reaches every
// pod's files after it, and each node's copy is kube-apiserver's again.
func TestHollowKubeletsThroughAnOutage(t *testing.T) {
	ctx := context.Background()
	tools, err := controlplane.EnsureTools(ctx, os.Stderr, "kubemark")
	if err != nil {
		t.Fatal(err)
	}
	hub := startHub(t)
	o := newOutage(t, hub.URL)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	ns := fmt.Sprintf("outage-%d", runs.Add(1))
	credsAndSettings(t, ns)

	runsWithFiles := func(n *hollowNode, pod *corev1.Pod, password string, viaKubelet bool) {
		t.Helper()
		n.runs(pod, viaKubelet)
		eventuallyFile(t, n.kubelet.SecretVolumeFile(pod.UID, "creds", "password"), password)
		eventuallyFile(t, n.kubelet.ConfigMapVolumeFile(pod.UID, "settings", "mode"), "a")
	}

	var nodes []*hollowNode
	pods := map[*hollowNode]*corev1.Pod{}
	for i := range 2 {
		n := newHollowNode(t, o, tools["kubemark"], fmt.Sprintf("outage-%s-%d", ns, i))
		if pods[n], err = admin.CoreV1().Pods(ns).Create(ctx, podUsingCreds(fmt.Sprintf("app-%d", i), n.name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		runsWithFiles(n, pods[n], "first", false)
		testserver.Eventually(t, 30*time.Second, "the copy persisted on "+n.name, func(context.Context) error {
			_, err := os.Stat(filepath.Join(n.viewDir, "copy"))
			return err
		})
	}

	o.begin()
	for _, n := range nodes {
		n.offline()
	}
	// A kubelet restart: the process and its root directory.
	restarted := nodes[0]
	restarted.restartKubelet()
	// A reboot: the endpoint too, which starts from the persisted copy.
	rebooted := nodes[1]
	rebooted.reboot()
	for _, n := range []*hollowNode{restarted, rebooted} {
		runsWithFiles(n, pods[n], "first", true)
	}
	secret, err := admin.CoreV1().Secrets(ns).Get(ctx, "creds", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret.StringData = map[string]string{"password": "changed during the outage"}
	if _, err := admin.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	o.end()
	for _, n := range nodes {
		runsWithFiles(n, pods[n], "changed during the outage", false)
	}
	// Each copy is kube-apiserver's: a consistent read through the
	// endpoint, answered from the copy, has kube-apiserver's version.
	want, err := admin.CoreV1().Secrets(ns).Get(ctx, "creds", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		asNode := kubernetes.NewForConfigOrDie(n.endpoint.kubelet)
		testserver.Eventually(t, 30*time.Second, n.name+"'s copy current", func(ctx context.Context) error {
			got, err := asNode.CoreV1().Secrets(ns).Get(ctx, "creds", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got.ResourceVersion != want.ResourceVersion {
				return fmt.Errorf("resourceVersion %s, kube-apiserver's %s", got.ResourceVersion, want.ResourceVersion)
			}
			return nil
		})
		if got := metric(t, n.endpoint, `nodeproxy_node_copy_reads_total{mode="offline"}`); got == "0" {
			t.Errorf("%s: no read served offline", n.name)
		}
	}
}

// keepLog copies a log that t.TempDir would remove into the directory
// named by NODEPROXY_TEST_LOGS, when set, for a failure to be read whole.
func keepLog(t *testing.T, name, path string) {
	dir := os.Getenv("NODEPROXY_TEST_LOGS")
	if dir == "" {
		return
	}
	b, err := os.ReadFile(path)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%s-%d.log", strings.ReplaceAll(t.Name(), "/", "_"), name, time.Now().UnixNano())), b, 0o644)
	}
	if err != nil {
		t.Logf("keep %s: %v", path, err)
	}
}
