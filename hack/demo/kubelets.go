package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/bench"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// demoKubelet is one hollow kubelet of the tour, and its endpoint when it
// has one.
type demoKubelet struct {
	name     string
	kubelet  *controlplane.HollowKubelet
	endpoint *controlplane.NodeEndpoint
	pod      *corev1.Pod
}

// showKubelets runs real kubelet code (hollow kubelets): two behind their
// node endpoints, one straight on kube-apiserver as today, each running a
// pod that mounts a Secret and a ConfigMap; then updates the Secret and
// shows it reaching each kubelet's file, and kube-apiserver's watches for
// both ways.
func showKubelets(ctx context.Context, cp *controlplane.ControlPlane, np *controlplane.Nodeproxy, bin string, kube kubernetes.Interface) error {
	tools, err := controlplane.EnsureTools(ctx, prefixed("    "), "kubemark")
	if err != nil {
		return err
	}
	watches := func() (float64, error) {
		m, err := bench.ScrapeAPIServer(ctx, kube.CoreV1().RESTClient())
		if err != nil {
			return 0, err
		}
		return m.Sum("apiserver_longrunning_requests", "verb", "WATCH", "resource", "secrets") +
			m.Sum("apiserver_longrunning_requests", "verb", "WATCH", "resource", "configmaps"), nil
	}
	before, err := watches()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "nodeproxy-demo-kubelets-")
	if err != nil {
		return err
	}
	var kubelets []*demoKubelet
	defer func() {
		for _, k := range kubelets {
			if k.kubelet != nil {
				k.kubelet.Stop()
			}
			if k.endpoint != nil {
				k.endpoint.Process.Stop()
			}
		}
		os.RemoveAll(dir)
	}()
	for _, k := range []struct {
		name  string
		front bool
	}{{"kubelet-1", true}, {"kubelet-2", true}, {"kubelet-direct", false}} {
		d := &demoKubelet{name: k.name}
		kubelets = append(kubelets, d)
		nodeDir := filepath.Join(dir, k.name)
		kubeconfig, err := cp.NodeKubeconfig(k.name, dir)
		if err != nil {
			return err
		}
		if k.front {
			if d.endpoint, err = cp.StartNodeEndpoint(ctx, controlplane.LeanNodeEndpointCommand(bin), k.name, nodeDir, np.URL); err != nil {
				return err
			}
			kubeconfig = d.endpoint.KubeletKubeconfig
			fmt.Printf("    %-15s nodeproxy node on %s, hub %s; the kubelet's kubeconfig points there\n", k.name, d.endpoint.URL, np.URL)
		} else {
			fmt.Printf("    %-15s straight on kube-apiserver, as kubelets are today\n", k.name)
		}
		if d.kubelet, err = controlplane.StartHollowKubelet(ctx, tools["kubemark"], controlplane.HollowKubeletOptions{
			Name: k.name, Kubeconfig: kubeconfig, Dir: nodeDir}); err != nil {
			return err
		}
		if err := d.kubelet.WaitNodeReady(ctx, kube); err != nil {
			return err
		}
	}
	if _, err := kube.CoreV1().Secrets(demoNamespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "api-key"},
		StringData: map[string]string{"key": "first"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := kube.CoreV1().ConfigMaps(demoNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "api-config"},
		Data: map[string]string{"mode": "fast"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for _, k := range kubelets {
		if k.pod, err = kube.CoreV1().Pods(demoNamespace).Create(ctx, apiPod("api-"+k.name, k.name), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, k := range kubelets {
			p, err := kube.CoreV1().Pods(demoNamespace).Get(ctx, k.pod.Name, metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("pods on the hollow kubelets not Running: %w", err)
	}
	after, err := watches()
	if err != nil {
		return err
	}
	fmt.Printf("    pods api-kubelet-1, api-kubelet-2, api-kubelet-direct Running, each mounting secret api-key and configmap api-config\n")
	fmt.Printf("    kube-apiserver's secrets and configmaps watches: %.0f before the kubelets, %.0f now: +%.0f, all kubelet-direct's\n", before, after, after-before)
	fmt.Printf("    (the endpoints' kubelets watch the same objects as channels of one websocket each to the hub)\n")

	fmt.Printf("    an admin updates secret api-key\n")
	s, err := kube.CoreV1().Secrets(demoNamespace).Get(ctx, "api-key", metav1.GetOptions{})
	if err != nil {
		return err
	}
	s.StringData = map[string]string{"key": "rotated"}
	updated := time.Now()
	if _, err := kube.CoreV1().Secrets(demoNamespace).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		return err
	}
	// Watched all at once, so that each time is its own kubelet's.
	seen := make([]time.Duration, len(kubelets))
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		done := true
		for i, k := range kubelets {
			if seen[i] > 0 {
				continue
			}
			if b, err := os.ReadFile(k.kubelet.SecretVolumeFile(k.pod.UID, "api-key", "key")); err == nil && string(b) == "rotated" {
				seen[i] = time.Since(updated)
				continue
			}
			done = false
		}
		return done, nil
	}); err != nil {
		return fmt.Errorf("the update did not reach every kubelet's file: %w", err)
	}
	for i, k := range kubelets {
		fmt.Printf("    %-15s %s reads \"rotated\" %.1f s after the update\n", k.name, k.kubelet.SecretVolumeFile(k.pod.UID, "api-key", "key"), seen[i].Seconds())
	}
	fmt.Printf("    (a kubelet rewrites a pod's volumes at the pod's next sync, so these times are the kubelets' own, whichever way they watch)\n")
	return nil
}

// apiPod runs on node with secret api-key and configmap api-config
// mounted.
func apiPod(name, node string) *corev1.Pod {
	f := false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			AutomountServiceAccountToken: &f,
			Containers: []corev1.Container{{Name: "api", Image: "registry.k8s.io/pause:3.10", VolumeMounts: []corev1.VolumeMount{
				{Name: "api-key", MountPath: "/etc/api-key"}, {Name: "api-config", MountPath: "/etc/api-config"}}}},
			Volumes: []corev1.Volume{
				{Name: "api-key", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "api-key"}}},
				{Name: "api-config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "api-config"}}}},
			},
		},
	}
}
