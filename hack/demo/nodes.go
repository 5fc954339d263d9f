package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/test/bench"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// demoNamespace holds the tour's objects; docs/examples/bulkget.yaml
// names them.
const demoNamespace = "demo"

// tourNode is one of the tour's nodes: a hollow kubelet and a hollow
// kube-proxy behind its endpoint, and the pod it runs.
type tourNode struct {
	*bench.HollowNode
	pod *corev1.Pod
	// mounts are the pod's secrets and configmaps, by volume name, each
	// with the key the demo reads.
	mounts []mount
	// asKubelet reaches the endpoint with the kubelet's credentials;
	// scrape reads its /metrics with them.
	asKubelet kubernetes.Interface
	scrape    *http.Client
}

// mount is one of a pod's volumes: a secret's or a configmap's, named
// as its object.
type mount struct {
	secret bool
	name   string
	key    string
}

// file is where the node's kubelet writes m's key for its pod.
func (n *tourNode) file(m mount) string {
	if m.secret {
		return n.Kubelet.SecretVolumeFile(n.pod.UID, m.name, m.key)
	}
	return n.Kubelet.ConfigMapVolumeFile(n.pod.UID, m.name, m.key)
}

var (
	dbPassword  = mount{secret: true, name: "db-password", key: "password"}
	webConfig   = mount{name: "web-config", key: "mode"}
	batchConfig = mount{name: "batch-config", key: "mode"}
)

// tour starts the three nodes, runs a pod on each, and shows
// kube-apiserver's long-running requests from them, a Secret rotation and
// a pod deleted.
func (d *demo) tour(ctx context.Context) error {
	d.step("Three nodes, each a hollow kubelet and a hollow kube-proxy (real kubelet and kube-proxy code) behind its node endpoint")
	if err := bench.GrantKubeProxy(ctx, d.cp); err != nil {
		return err
	}
	if err := d.cp.EnsureNamespace(ctx, demoNamespace); err != nil {
		return err
	}
	if err := d.seed(ctx); err != nil {
		return err
	}
	before, err := controlplane.ReadLongRunningRequests(ctx, d.admin.CoreV1().RESTClient())
	if err != nil {
		return err
	}
	started := time.Now()
	for _, name := range []string{"node-a", "node-b", "node-c"} {
		d.nodes = append(d.nodes, &tourNode{HollowNode: &bench.HollowNode{Name: name}})
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, n := range d.nodes {
		g.Go(func() error {
			return n.Start(gctx, d.target, d.admin, d.tools["kubemark"], bench.HollowNodeSpec{Dir: filepath.Join(d.dir, n.Name), Fronted: true, Proxy: true})
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, n := range d.nodes {
		cfg, err := clientcmd.BuildConfigFromFlags("", n.Endpoint.KubeletKubeconfig)
		if err != nil {
			return err
		}
		if n.asKubelet, err = kubernetes.NewForConfig(cfg); err != nil {
			return err
		}
		if n.scrape, err = rest.HTTPClientFor(cfg); err != nil {
			return err
		}
	}
	d.say("node-a, node-b, node-c Ready %.1f s after their start; each one's kubelet and kube-proxy reach the API through its", time.Since(started).Seconds())
	d.say("endpoint, which keeps a copy of what the node may read (its node view), on disk")

	created := time.Now()
	a, b, c := d.nodes[0], d.nodes[1], d.nodes[2]
	for _, p := range []struct {
		n    *tourNode
		name string
		m    []mount
	}{{a, "web-0", []mount{dbPassword, webConfig}}, {b, "web-1", []mount{dbPassword, webConfig}}, {c, "batch-0", []mount{batchConfig}}} {
		p.n.mounts = p.m
		if p.n.pod, err = d.admin.CoreV1().Pods(demoNamespace).Create(ctx, tourPod(p.name, p.n.Name, p.m), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if err := d.waitRunning(ctx, d.nodes, map[string]string{"password": "first", "mode": "v1"}); err != nil {
		return err
	}
	d.say("web-0 on node-a and web-1 on node-b mount secret db-password and configmap web-config, batch-0 on node-c configmap")
	d.say("batch-config: all Running with their files %.1f s after their creation", time.Since(created).Seconds())

	d.step("kube-apiserver's long-running requests from the three nodes")
	from, err := bench.LongRunningFrom(ctx, d.admin.CoreV1().RESTClient(), before)
	if err != nil {
		return err
	}
	d.say("%d (%d before the nodes started, kube-apiserver's own and the hub's; %d now)", from.Count("", ""), before.Count("", ""), before.Count("", "")+from.Count("", ""))
	watches, err := d.endpointWatches(ctx)
	if err != nil {
		return err
	}
	d.say("the nodes' watches, through their endpoints: %s", watches)

	d.step("A Secret rotated: an admin updates demo/db-password")
	updated := time.Now()
	if err := d.setData(ctx, dbPassword, "rotated"); err != nil {
		return err
	}
	for _, n := range []*tourNode{a, b} {
		if err := waitFile(ctx, n.file(dbPassword), "rotated"); err != nil {
			return err
		}
		d.say("%s: %s's file holds \"rotated\" %.1f s after the update", n.Name, n.pod.Name, time.Since(updated).Seconds())
	}
	d.say("(its endpoint's copy had it at once; the kubelet rewrites a pod's volumes at the pod's next sync, on its own schedule)")

	d.step("A pod deleted: an admin deletes demo/web-1, node-b's only pod")
	objects := func() float64 {
		m, err := bench.Scrape(ctx, b.scrape, b.Endpoint.URL+"/metrics")
		if err != nil {
			return -1
		}
		return m.Sum("nodeproxy_node_copy_objects")
	}
	held := objects()
	deleted := time.Now()
	if err := d.admin.CoreV1().Pods(demoNamespace).Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := d.admin.CoreV1().Pods(demoNamespace).Get(ctx, "web-1", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		return fmt.Errorf("web-1 not gone: %w", err)
	}
	d.say("node-b's kubelet stopped it and confirmed its deletion %.1f s later", time.Since(deleted).Seconds())
	var answer error
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, answer = b.asKubelet.CoreV1().Secrets(demoNamespace).Get(ctx, dbPassword.name, metav1.GetOptions{})
		return apierrors.IsForbidden(answer) || apierrors.IsNotFound(answer), nil
	}); err != nil {
		return fmt.Errorf("node-b still reads secret db-password after web-1 went (%v): %w", answer, err)
	}
	// The copy lets go of what node-b may no longer read as the hub's
	// view of it drops them; give it a few seconds.
	shrunk := held
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		shrunk = objects()
		return shrunk < held, nil
	})
	d.say("node-b's copy went from %.0f objects to %.0f; node-b asking its endpoint for secret db-password now: %s", held, shrunk, short(answer))
	return nil
}

// seed creates the tour's objects, and a Service for the kube-proxies.
func (d *demo) seed(ctx context.Context) error {
	core := d.admin.CoreV1()
	if _, err := core.Secrets(demoNamespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: dbPassword.name},
		StringData: map[string]string{dbPassword.key: "first"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for _, m := range []mount{webConfig, batchConfig} {
		if _, err := core.ConfigMaps(demoNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: m.name},
			Data: map[string]string{m.key: "v1"}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	_, err := core.Services(demoNamespace).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	return err
}

// tourPod runs on node with mounts as volumes.
func tourPod(name, node string, mounts []mount) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": strings.TrimRight(name, "-0123456789")}},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	for _, m := range mounts {
		var src corev1.VolumeSource
		if m.secret {
			src.Secret = &corev1.SecretVolumeSource{SecretName: m.name}
		} else {
			src.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: m.name}}
		}
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: m.name, VolumeSource: src})
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: m.name, MountPath: "/etc/" + m.name})
	}
	return p
}

// waitRunning waits until every node's pod runs on its kubelet (asked
// itself, not kube-apiserver, which may be out of reach) with each of
// its files holding want[key], and reads the pods' UIDs from the API
// first when it can.
func (d *demo) waitRunning(ctx context.Context, nodes []*tourNode, want map[string]string) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, n := range nodes {
			if last = n.Kubelet.Runs(ctx, n.pod.UID); last != nil {
				return false, nil
			}
			for _, m := range n.mounts {
				b, err := os.ReadFile(n.file(m))
				if err != nil || string(b) != want[m.key] {
					last = fmt.Errorf("%s: %s holds %q (%v), want %q", n.pod.Name, m.name, b, err, want[m.key])
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("pods not Running with their files (%v): %w", last, err)
	}
	return nil
}

// endpointWatches says where the nodes' watches are served from, summed
// over their endpoints: the kubelets' (from the copy, the hub or
// kube-apiserver) and kube-proxy's (from the hub or kube-apiserver).
func (d *demo) endpointWatches(ctx context.Context) (string, error) {
	by := map[string]float64{}
	for _, n := range d.nodes {
		m, err := bench.Scrape(ctx, n.scrape, n.Endpoint.URL+"/metrics")
		if err != nil {
			return "", err
		}
		for _, path := range []string{"copy", "hub", "apiserver"} {
			by["kubelet "+path] += m.Sum("nodeproxy_node_watches", "path", path)
			by["proxy "+path] += m.Sum("nodeproxy_node_client_watches", "path", path)
		}
	}
	return fmt.Sprintf("the kubelets' %.0f from their copies, %.0f from the hub, %.0f sent to kube-apiserver; kube-proxy's %.0f from the hub, %.0f sent to kube-apiserver",
		by["kubelet copy"], by["kubelet hub"], by["kubelet apiserver"], by["proxy hub"], by["proxy apiserver"]), nil
}

// setData sets m's key in its object to value.
func (d *demo) setData(ctx context.Context, m mount, value string) error {
	patch := fmt.Appendf(nil, `{"data":{%q:%q}}`, m.key, value)
	if m.secret {
		patch = fmt.Appendf(nil, `{"stringData":{%q:%q}}`, m.key, value)
		_, err := d.admin.CoreV1().Secrets(demoNamespace).Patch(ctx, m.name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}
	_, err := d.admin.CoreV1().ConfigMaps(demoNamespace).Patch(ctx, m.name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// waitFile waits until path holds value.
func waitFile(ctx context.Context, path, value string) error {
	var got []byte
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		got, _ = os.ReadFile(path)
		return string(got) == value, nil
	}); err != nil {
		return fmt.Errorf("%s holds %q, not %q: %w", path, got, value, err)
	}
	return nil
}

// short is an API error as its code and reason, and the start of its
// message.
func short(err error) string {
	if err == nil {
		return "allowed"
	}
	s := err.Error()
	if st, ok := err.(apierrors.APIStatus); ok {
		s = fmt.Sprintf("%d %s", st.Status().Code, st.Status().Reason)
		if m := st.Status().Message; m != "" && m != "unknown" {
			s += ": " + m
		}
	}
	if len(s) > 150 {
		s = s[:150] + "..."
	}
	return s
}
