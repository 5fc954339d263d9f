package endpoint_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/bench"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// hollowNodes is how many hollow kubelets TestHollowKubelets runs: enough
// to show that the watches on kube-apiserver do not grow with nodes, few
// enough for a loaded 2-core machine (each is about 80 MB).
const hollowNodes = 2

// TestHollowKubelets runs real kubelet code (kubemark --morph=kubelet)
// behind node endpoints: pods with secret and configmap volumes and an
// environment variable from the secret run; their files come only
// through the endpoints; kube-apiserver carries no secrets, configmaps,
// services, runtimeclasses or csidrivers watch for them; a secret's update reaches the files, also while the hub
// is down (through kube-apiserver) and after it is back (through the hub
// again); and a deleted pod takes its node's access to the secret with it.
func TestHollowKubelets(t *testing.T) {
	ctx := context.Background()
	tools, err := controlplane.EnsureTools(ctx, os.Stderr, "kubemark")
	if err != nil {
		t.Fatal(err)
	}
	hubPort := freePort(t)
	hub := startHubOn(t, hubPort)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	// The hub's own informers are watching by now: what follows is the
	// kubelets' share.
	before, err := bench.ScrapeAPIServer(ctx, admin.CoreV1().RESTClient())
	if err != nil {
		t.Fatal(err)
	}

	ns := fmt.Sprintf("hollow-%d", runs.Add(1))
	credsAndSettings(t, ns)

	type hollow struct {
		*controlplane.HollowKubelet
		endpoint *node
		pod      *corev1.Pod
	}
	var kubelets []hollow
	for i := range hollowNodes {
		name := fmt.Sprintf("hollow-%s-%d", ns, i)
		n := startNode(t, name, hub.URL)
		dir := t.TempDir()
		kubeconfig := filepath.Join(dir, "kubeconfig")
		if err := controlplane.WriteKubeconfig(n.kubelet, kubeconfig); err != nil {
			t.Fatal(err)
		}
		h, err := controlplane.StartHollowKubelet(ctx, tools["kubemark"], controlplane.HollowKubeletOptions{Name: name, Kubeconfig: kubeconfig, Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		// Registered after the endpoint's and the directory's cleanups, so
		// it runs before them.
		t.Cleanup(func() {
			h.Stop()
			_ = admin.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
		if err := h.WaitNodeReady(ctx, admin); err != nil {
			t.Fatal(err)
		}
		pod, err := admin.CoreV1().Pods(ns).Create(ctx, podUsingCreds(fmt.Sprintf("app-%d", i), name), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		kubelets = append(kubelets, hollow{HollowKubelet: h, endpoint: n, pod: pod})
	}

	for _, k := range kubelets {
		testserver.Eventually(t, 2*time.Minute, k.pod.Name+" Running", func(ctx context.Context) error {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, k.pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("phase %s, conditions %v", p.Status.Phase, p.Status.Conditions)
			}
			return nil
		})
		eventuallyFile(t, k.SecretVolumeFile(k.pod.UID, "creds", "password"), "first")
		eventuallyFile(t, k.ConfigMapVolumeFile(k.pod.UID, "settings", "mode"), "a")
	}

	// The kubelet's own pods and Node come from the copy of the node's
	// view too, and so do the cluster-wide types it watches. A kubelet
	// whose informer started before its endpoint reached the hub watches
	// kube-apiserver until the endpoint returns the watch to the copy, so
	// the count is awaited, not read once.
	for _, resource := range []string{"secrets", "configmaps", "pods", "nodes", "services", "runtimeclasses", "csidrivers"} {
		// The endpoints share one metrics registry in this process: the
		// counts are every endpoint's.
		testserver.Eventually(t, 30*time.Second, resource+" watches off kube-apiserver", func(context.Context) error {
			if got := offAPIServer(t, kubelets[0].endpoint, resource); got != hollowNodes {
				return fmt.Errorf("%d %s watches served from the copy or the hub, want one per kubelet (%d)", got, resource, hollowNodes)
			}
			return nil
		})
	}
	// The hub's probes for consistent reads are watches of
	// kube-apiserver too, for a second or two each (docs/api.md, "Which
	// resourceVersion gives what"): the count is awaited until they
	// have ended, not read once.
	var after bench.Metrics
	testserver.Eventually(t, 30*time.Second, "no node's watch on kube-apiserver", func(ctx context.Context) error {
		var err error
		if after, err = bench.ScrapeAPIServer(ctx, admin.CoreV1().RESTClient()); err != nil {
			return err
		}
		for _, resource := range []string{"secrets", "configmaps", "services", "runtimeclasses", "csidrivers"} {
			b := before.Sum("apiserver_longrunning_requests", "verb", "WATCH", "resource", resource)
			if a := after.Sum("apiserver_longrunning_requests", "verb", "WATCH", "resource", resource); a > b {
				return fmt.Errorf("kube-apiserver carries %v %s watches with %d kubelets running, %v before: some bypass the endpoints", a, resource, hollowNodes, b)
			}
		}
		return nil
	})
	for _, resource := range []string{"secrets", "configmaps", "services", "runtimeclasses", "csidrivers"} {
		b := before.Sum("apiserver_longrunning_requests", "verb", "WATCH", "resource", resource)
		a := after.Sum("apiserver_longrunning_requests", "verb", "WATCH", "resource", resource)
		onHub := metric(t, kubelets[0].endpoint, `nodeproxy_node_watches{path="hub",resource="`+resource+`"}`)
		onCopy := metric(t, kubelets[0].endpoint, `nodeproxy_node_watches{path="copy",resource="`+resource+`"}`)
		proxied := metric(t, kubelets[0].endpoint, `nodeproxy_node_watches{path="apiserver",resource="`+resource+`"}`)
		t.Logf("%s watches: kube-apiserver %v before the kubelets, %v with them; first endpoint: %s from its copy, %s on the hub, %s proxied", resource, b, a, onCopy, onHub, proxied)
		if proxied != "0" {
			t.Errorf("%s %s watches proxied to kube-apiserver", proxied, resource)
		}
	}
	for _, k := range kubelets {
		if u, err := bench.ReadUsage(k.Process.Pid()); err == nil {
			t.Logf("kubelet %s: RSS %d MiB", k.Name, u.RSS>>20)
		}
	}

	update := func(password string) {
		t.Helper()
		secret, err := admin.CoreV1().Secrets(ns).Get(ctx, "creds", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		secret.StringData = map[string]string{"password": password}
		if _, err := admin.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, k := range kubelets {
			eventuallyFile(t, k.SecretVolumeFile(k.pod.UID, "creds", "password"), password)
		}
	}
	update("second")

	// The hub goes away: the kubelets keep their pods and get updates
	// through kube-apiserver (a copy that no longer follows the hub is
	// not served while kube-apiserver answers); then it comes back, and
	// so do the watches, to the copy.
	watchingThrough := func(path string) func(context.Context) error {
		return func(context.Context) error {
			got := metric(t, kubelets[0].endpoint, `nodeproxy_node_watches{path="`+path+`",resource="secrets"}`)
			if got != fmt.Sprint(hollowNodes) {
				return fmt.Errorf("%s secrets watches through %s, want %d", got, path, hollowNodes)
			}
			return nil
		}
	}
	hub.Stop(t)
	testserver.Eventually(t, time.Minute, "the kubelets' watches on kube-apiserver", watchingThrough("apiserver"))
	update("while the hub is down")
	startHubOn(t, hubPort)
	testserver.Eventually(t, time.Minute, "the kubelets' watches back on the copy", watchingThrough("copy"))
	update("after the hub is back")
	for _, k := range kubelets {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, k.pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != corev1.PodRunning {
			t.Errorf("%s after the hub's outage: %s", k.pod.Name, p.Status.Phase)
		}
	}

	// The first node's only pod goes: so does its access to the secret.
	first := kubelets[0]
	if err := admin.CoreV1().Pods(ns).Delete(ctx, first.pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	asFirst := kubernetes.NewForConfigOrDie(first.endpoint.kubelet)
	testserver.Eventually(t, 2*time.Minute, "access gone with the pod", func(ctx context.Context) error {
		_, err := asFirst.CoreV1().Secrets(ns).Get(ctx, "creds", metav1.GetOptions{})
		if apierrors.IsForbidden(err) {
			return nil
		}
		return fmt.Errorf("get as %s: %v, want 403", first.Name, err)
	})
}

// credsAndSettings makes namespace ns with what podUsingCreds uses: the
// secret creds (password "first") and the configmap settings (mode "a").
func credsAndSettings(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"}, StringData: map[string]string{"password": "first"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"mode": "a"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// podUsingCreds runs on node with the secret creds and the configmap
// settings as volumes, mounted (the kubelet skips volumes no container
// mounts), and the password as an environment variable.
func podUsingCreds(name, node string) *corev1.Pod { return podUsing(name, node, "creds") }

// podUsing is podUsingCreds with the secret secret in place of creds
// (the volume and the variable keep their names).
func podUsing(name, node, secret string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			AutomountServiceAccountToken: new(false),
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.k8s.io/pause:3.10",
				Env: []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "password"}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "creds", MountPath: "/etc/creds"}, {Name: "settings", MountPath: "/etc/settings"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}},
				{Name: "settings", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}},
			},
		},
	}
}

// eventuallyFile waits until the file at path holds want. The kubelet
// rewrites a volume at its pod's next sync, every 10 s or so.
func eventuallyFile(t *testing.T, path, want string) {
	t.Helper()
	testserver.Eventually(t, 90*time.Second, path, func(context.Context) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if string(b) != want {
			return fmt.Errorf("holds %q, want %q", b, want)
		}
		return nil
	})
}

// offAPIServer is how many of n's kubelet's watches of resource are
// served off kube-apiserver: from the copy of the node's view or by hub
// channels.
func offAPIServer(t *testing.T, n *node, resource string) int {
	t.Helper()
	total := 0
	for _, path := range []string{"copy", "hub"} {
		v, err := strconv.Atoi(metric(t, n, `nodeproxy_node_watches{path="`+path+`",resource="`+resource+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		total += v
	}
	return total
}
