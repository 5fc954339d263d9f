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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// hollowNode is one hollow node behind an endpoint that reaches
// kube-apiserver and the hub through an outage's forwarders: the
// endpoint, persisting its copy in viewDir, and a real kubelet
// (kubemark) in front of it.
type hollowNode struct {
	t *testing.T
	o *outage
	// sharded, when set, is the hub instead of o's forwarder: the
	// endpoint dials the replicas' Service, and kube-apiserver directly.
	sharded            *testserver.Sharded
	kubemark           string
	name, viewDir, dir string
	kp                 *controlplane.KeyPair
	endpoint           *node
	kubelet            *controlplane.HollowKubelet
}

// newHollowNode starts a hollow node named name, its endpoint and its
// kubelet, and waits until its Node is Ready.
func newHollowNode(t *testing.T, o *outage, kubemark, name string) *hollowNode {
	t.Helper()
	return startHollowNode(&hollowNode{t: t, o: o, kubemark: kubemark, name: name, dir: t.TempDir()})
}

// newShardedHollowNode is newHollowNode behind sharded hub replicas.
func newShardedHollowNode(t *testing.T, sh *testserver.Sharded, kubemark, name string) *hollowNode {
	t.Helper()
	return startHollowNode(&hollowNode{t: t, sharded: sh, kubemark: kubemark, name: name, dir: t.TempDir()})
}

func startHollowNode(n *hollowNode) *hollowNode {
	t, name := n.t, n.name
	t.Helper()
	n.viewDir = filepath.Join(n.dir, "node-view")
	var err error
	if n.kp, err = cp.ClientCA.ClientCert("system:node:"+name, []string{"system:nodes"}, "", ""); err != nil {
		t.Fatal(err)
	}
	n.startEndpoint()
	n.startKubelet()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	if err := n.kubelet.WaitNodeReady(context.Background(), admin); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *hollowNode) startEndpoint() {
	if n.sharded != nil {
		n.endpoint = startNodeWith(n.t, n.name, nodeSpec{hub: n.sharded.ServiceURL(), hubDial: n.sharded.Dial, kubelet: n.kp, viewDir: n.viewDir})
		return
	}
	n.endpoint = startNodeWith(n.t, n.name, nodeSpec{
		apiServer: "https://" + n.o.api.Addr(), hub: "https://" + n.o.hub.Addr(), kubelet: n.kp, viewDir: n.viewDir})
}

// startKubelet starts the node's kubelet, with a root directory of its
// own: every volume is written anew.
func (n *hollowNode) startKubelet() {
	t := n.t
	kubeconfig := filepath.Join(n.dir, "kubeconfig")
	if err := controlplane.WriteKubeconfig(n.endpoint.kubelet, kubeconfig); err != nil {
		t.Fatal(err)
	}
	h, err := controlplane.StartHollowKubelet(context.Background(), n.kubemark, controlplane.HollowKubeletOptions{Name: n.name, Kubeconfig: kubeconfig, Dir: n.dir})
	if err != nil {
		t.Fatal(err)
	}
	n.kubelet = h
	t.Cleanup(h.Stop)
	// Cleanups run last first: this one reads the log before Stop.
	t.Cleanup(func() {
		if t.Failed() {
			// Where the kubelet was, in its log, if it stopped answering.
			h.Process.DumpGoroutines()
			t.Logf("%s: %s", n.name, h.Process.Describe())
			if stacks, err := controlplane.Goroutines(h.LogPath, "pkg/kubelet/server"); err != nil {
				t.Log(err)
			} else {
				t.Logf("%s: %d goroutines in the kubelet's server:\n%s", n.name, len(stacks), strings.Join(stacks, "\n\n"))
			}
			keepLog(t, n.name, h.LogPath)
		}
	})
}

// restartKubelet restarts the kubelet, as an upgrade or an OOM kill
// does; reboot restarts the endpoint too, from its persisted copy.
func (n *hollowNode) restartKubelet() {
	n.kubelet.Stop()
	n.startKubelet()
}

func (n *hollowNode) reboot() {
	n.kubelet.Stop()
	n.endpoint.stop()
	n.startEndpoint()
	n.startKubelet()
}

// runs waits until the kubelet runs pod, asking the kubelet itself
// (viaKubelet: the control plane may be out of reach) or kube-apiserver.
func (n *hollowNode) runs(pod *corev1.Pod, viaKubelet bool) {
	n.t.Helper()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	testserver.Eventually(n.t, 2*time.Minute, pod.Name+" Running on "+n.name, func(ctx context.Context) error {
		if viaKubelet {
			return n.kubelet.Runs(ctx, pod.UID)
		}
		p, err := admin.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
}

// hasNot fails if the kubelet has the pod of uid.
func (n *hollowNode) hasNot(uid types.UID, what string) {
	n.t.Helper()
	pods, err := n.kubelet.Pods(context.Background())
	if err != nil {
		n.t.Fatal(err)
	}
	for _, p := range pods {
		if p.UID == uid {
			n.t.Errorf("%s: the kubelet has %s (%s/%s, phase %s)", n.name, what, p.Namespace, p.Name, p.Status.Phase)
		}
	}
}

// offline waits until the endpoint says the node is offline.
func (n *hollowNode) offline() {
	n.t.Helper()
	testserver.Eventually(n.t, time.Minute, n.name+" offline", func(context.Context) error {
		if code, body := get(n.t, n.endpoint.metrics+"/readyz", ""); code != 200 || !strings.Contains(body, "offline") {
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		return nil
	})
}

// firstWrite waits until the file at path exists and fails unless the
// first content seen there is want: a kubelet that wrote an older value
// first, even for a moment, served the past.
func firstWrite(t *testing.T, path, want string) {
	t.Helper()
	testserver.Eventually(t, 2*time.Minute, path, func(context.Context) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if string(b) != want {
			t.Errorf("%s first held %q, want %q", path, b, want)
		}
		return nil
	})
}
