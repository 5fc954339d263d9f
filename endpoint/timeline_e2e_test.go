package endpoint_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestNoNodeGoesBackInTime loses a node's hub and kube-apiserver, in
// either order and at once, while the cluster changes: a Secret every
// pod mounts is rotated, a pod of node a is deleted, and a new pod with
// a new Secret is created on node b. Then both kubelets restart offline
// (a's kubelet alone, b's whole node, its endpoint from the persisted
// copy). Whatever the order, a restarted kubelet is served nothing older
// than what its node was served before: what reached the node (through
// the hub's view, or from kube-apiserver while the hub was away) stays:
// the rotated value first, the deleted pod not started, the new pod
// started with its files. What could not reach it (both lost at once)
// is not invented either: the node goes on as it was, and catches up
// after the outage.
func TestNoNodeGoesBackInTime(t *testing.T) {
	ctx := context.Background()
	tools, err := controlplane.EnsureTools(ctx, os.Stderr, "kubemark")
	if err != nil {
		t.Fatal(err)
	}
	hub := startHub(t)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	for _, order := range []struct {
		name string
		// lose loses what is lost before the changes; the rest is
		// lost after them.
		lose, rest func(*outage)
		// reaches: the changes reach the node between the losses;
		// hubFirst: the hub is lost first.
		reaches, hubFirst bool
	}{
		{"the hub, then kube-apiserver", (*outage).cutHub, (*outage).cutAPIServer, true, true},
		{"kube-apiserver, then the hub", (*outage).cutAPIServer, (*outage).cutHub, true, false},
		{"both at once", (*outage).begin, func(*outage) {}, false, true},
	} {
		t.Run(order.name, func(t *testing.T) {
			o := newOutage(t, hub.URL)
			ns := fmt.Sprintf("timeline-%d", runs.Add(1))
			credsAndSettings(t, ns)
			a := newHollowNode(t, o, tools["kubemark"], ns+"-a")
			b := newHollowNode(t, o, tools["kubemark"], ns+"-b")
			create := func(p *corev1.Pod) *corev1.Pod {
				t.Helper()
				p, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			a1, a2, b1 := create(podUsingCreds("a1", a.name)), create(podUsingCreds("a2", a.name)), create(podUsingCreds("b1", b.name))
			for _, np := range []struct {
				n *hollowNode
				p *corev1.Pod
			}{{a, a1}, {a, a2}, {b, b1}} {
				np.n.runs(np.p, false)
				eventuallyFile(t, np.n.kubelet.SecretVolumeFile(np.p.UID, "creds", "password"), "first")
			}

			order.lose(o)
			for _, n := range []*hollowNode{a, b} {
				testserver.Eventually(t, time.Minute, n.name+" without the hub", func(context.Context) error {
					if got := metric(t, n.endpoint, "nodeproxy_node_hub_connected"); order.hubFirst && got != "0" {
						return fmt.Errorf("hub_connected %s", got)
					}
					return nil
				})
			}
			changed := time.Now()
			rotate(t, ns, "creds", "rotated")
			if err := admin.CoreV1().Pods(ns).Delete(ctx, a2.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
				t.Fatal(err)
			}
			if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "fresh"}, StringData: map[string]string{"password": "new"},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			b2 := create(podUsing("b2", b.name, "fresh"))
			if order.reaches {
				for _, np := range []struct {
					n *hollowNode
					p *corev1.Pod
				}{{a, a1}, {b, b1}} {
					eventuallyFile(t, np.n.kubelet.SecretVolumeFile(np.p.UID, "creds", "password"), "rotated")
				}
				t.Logf("the rotation reached every file %s after it", time.Since(changed).Round(100*time.Millisecond))
				testserver.Eventually(t, time.Minute, "a2 gone from "+a.name, func(ctx context.Context) error {
					return hasPod(ctx, a, a2)
				})
				// Its status cannot reach kube-apiserver when it is the
				// one lost first: its volume says that the kubelet
				// started it.
				eventuallyFile(t, b.kubelet.SecretVolumeFile(b2.UID, "creds", "password"), "new")
			}

			order.rest(o)
			a.offline()
			b.offline()
			a.restartKubelet()
			b.reboot()
			// The kubelet's /pods shows the pods' status as the API last
			// had it; a volume written anew by the restarted kubelet is
			// what says it started the pod.
			if !order.reaches {
				// Nothing of the changes reached the node: it goes on as
				// it was (docs/api.md, "What the copy never forgets").
				firstWrite(t, a.kubelet.SecretVolumeFile(a1.UID, "creds", "password"), "first")
				firstWrite(t, a.kubelet.SecretVolumeFile(a2.UID, "creds", "password"), "first")
				firstWrite(t, b.kubelet.SecretVolumeFile(b1.UID, "creds", "password"), "first")
				b.hasNot(b2.UID, "b2, which it could not know of")
			} else {
				firstWrite(t, a.kubelet.SecretVolumeFile(a1.UID, "creds", "password"), "rotated")
				// a1 written: the restarted kubelet has listed its pods.
				a.hasNot(a2.UID, "a2, deleted before the outage")
				if _, err := os.Stat(a.kubelet.SecretVolumeFile(a2.UID, "creds", "password")); !os.IsNotExist(err) {
					t.Errorf("a2's volume on %s: %v, want none: the kubelet started a pod deleted before the outage", a.name, err)
				}
				firstWrite(t, b.kubelet.SecretVolumeFile(b1.UID, "creds", "password"), "rotated")
				firstWrite(t, b.kubelet.SecretVolumeFile(b2.UID, "creds", "password"), "new")
			}

			o.end()
			for _, np := range []struct {
				n *hollowNode
				p *corev1.Pod
			}{{a, a1}, {b, b1}, {b, b2}} {
				np.n.runs(np.p, false)
			}
			eventuallyFile(t, a.kubelet.SecretVolumeFile(a1.UID, "creds", "password"), "rotated")
			eventuallyFile(t, b.kubelet.SecretVolumeFile(b1.UID, "creds", "password"), "rotated")
			testserver.Eventually(t, time.Minute, "a2 gone from "+a.name, func(ctx context.Context) error {
				return hasPod(ctx, a, a2)
			})
		})
	}
}

// hasPod is nil once n's kubelet no longer has p.
func hasPod(ctx context.Context, n *hollowNode, p *corev1.Pod) error {
	pods, err := n.kubelet.Pods(ctx)
	if err != nil {
		return err
	}
	for _, q := range pods {
		if q.UID == p.UID {
			return fmt.Errorf("the kubelet still has %s (phase %s)", p.Name, q.Status.Phase)
		}
	}
	return nil
}
