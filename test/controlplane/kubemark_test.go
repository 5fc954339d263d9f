package controlplane

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// kubeletTimeout bounds each wait on the hollow kubelet. Pod start and
// volume refresh follow the kubelet's 10 s sync period, with jitter; a
// loaded two-core machine running other test packages stretches that.
const kubeletTimeout = 3 * time.Minute

// TestHollowKubeletRunsPodWithSecretAndConfigMap runs a hollow kubelet
// against kube-apiserver as system:node:<name>, as a real node would be,
// and checks the path a proxy in front of kube-apiserver has to keep
// working: the Node registers and turns Ready, a pod bound to it starts
// with a Secret and a ConfigMap as volumes, a Secret as an env var and a
// ServiceAccount token the kubelet requests for it, the volume files follow
// an update of the Secret, and the pod's deletion completes.
func TestHollowKubeletRunsPodWithSecretAndConfigMap(t *testing.T) {
	ctx := context.Background()
	bin := kubemarkBinary(t)
	admin := clientFor(t, cp.AdminConfig())
	dir := t.TempDir()
	const node, ns = "hollow-0", "hollow-kubelet"

	kubeconfig, err := cp.NodeKubeconfig(node, dir)
	if err != nil {
		t.Fatal(err)
	}
	// Runs after h.Stop (cleanups run last first), so the kubelet cannot
	// recreate what it removes; it lets -count=2 and later tests start
	// clean even if this one failed half-way.
	t.Cleanup(func() {
		ctx := context.Background()
		_ = admin.CoreV1().Pods(ns).Delete(ctx, "app", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		_ = admin.CoreV1().Secrets(ns).Delete(ctx, "creds", metav1.DeleteOptions{})
		for _, name := range []string{"settings", "kube-root-ca.crt"} {
			_ = admin.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{})
		}
		_ = admin.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{})
	})
	watchesBefore, err := ReadLongRunningRequests(ctx, admin.CoreV1().RESTClient())
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	h, err := StartHollowKubelet(ctx, bin, HollowKubeletOptions{Name: node, Kubeconfig: kubeconfig, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	// Registered after t.TempDir, so it runs first: the kubelet stops
	// before its log directory goes.
	t.Cleanup(h.Stop)
	if err := h.WaitNodeReady(ctx, admin); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s Ready %.1f s after start; kubelet root %s, log %s", node, time.Since(began).Seconds(), h.RootDir, h.LogPath)

	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// kube-controller-manager publishes this ConfigMap in every namespace;
	// the ServiceAccount admission plugin puts it, with a token, in the
	// kube-api-access-<random> volume it adds to each pod.
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"},
		Data:       map[string]string{"ca.crt": string(certPEM(cp.ServingCA.Cert.Raw))},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create kube-root-ca.crt: %v", err)
	}
	secret, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		StringData: map[string]string{"password": "first"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create secret: %v", err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings"},
		Data:       map[string]string{"mode": "hollow"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create configmap: %v", err)
	}
	pod, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{
			// No scheduler runs: bind the pod to the node directly.
			NodeName: node,
			Containers: []corev1.Container{{
				Name:  "app",
				Image: "registry.k8s.io/pause:3.10",
				Env: []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{
					SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password"},
				}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "creds", MountPath: "/creds"}, {Name: "settings", MountPath: "/settings"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}},
				{Name: "settings", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "settings"},
				}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}

	waitKubelet(t, h, "pod Running", func(ctx context.Context) error {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %q, conditions %v, containers %v", p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
		}
		return nil
	})
	secretFile := h.SecretVolumeFile(pod.UID, "creds", "password")
	if got := readFile(t, secretFile); got != "first" {
		t.Errorf("%s = %q, want %q", secretFile, got, "first")
	}
	configFile := h.ConfigMapVolumeFile(pod.UID, "settings", "mode")
	if got := readFile(t, configFile); got != "hollow" {
		t.Errorf("%s = %q, want %q", configFile, got, "hollow")
	}
	tokenVolume := ""
	for _, v := range pod.Spec.Volumes {
		if strings.HasPrefix(v.Name, "kube-api-access-") {
			tokenVolume = v.Name
		}
	}
	if tokenVolume == "" {
		t.Fatalf("admission added no kube-api-access volume: %v", pod.Spec.Volumes)
	}
	review, err := admin.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: readFile(t, h.ProjectedVolumeFile(pod.UID, tokenVolume, "token"))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("review the pod's token: %v", err)
	}
	if want := "system:serviceaccount:" + ns + ":default"; !review.Status.Authenticated || review.Status.User.Username != want {
		t.Errorf("pod's token: authenticated %v as %q (%s); want %s", review.Status.Authenticated, review.Status.User.Username, review.Status.Error, want)
	}

	if rss, err := vmRSS(h.Process.Pid()); err != nil {
		t.Errorf("kubelet memory: %v", err)
	} else {
		t.Logf("kubelet VmRSS with one pod: %s", rss)
	}

	// The kubelet keeps a watch open per Secret and ConfigMap a pod of
	// its uses (the Watch change detection strategy, its default); those
	// are the long-running requests a proxy must carry per node.
	waitKubelet(t, h, "watches of the pod's Secret and ConfigMap", func(ctx context.Context) error {
		now, err := ReadLongRunningRequests(ctx, admin.CoreV1().RESTClient())
		if err != nil {
			return err
		}
		for _, resource := range []string{"secrets", "configmaps"} {
			if n, before := now.Count("WATCH", resource), watchesBefore.Count("WATCH", resource); n <= before {
				return fmt.Errorf("WATCH %s: %d long-running, %d before the kubelet started", resource, n, before)
			}
		}
		t.Logf("apiserver_longrunning_requests since the kubelet started: %s", now.Minus(watchesBefore))
		return nil
	})

	secret.StringData = map[string]string{"password": "second"}
	if _, err := admin.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update secret: %v", err)
	}
	updated := time.Now()
	waitKubelet(t, h, "secret volume updated", func(context.Context) error {
		b, err := os.ReadFile(secretFile)
		if err != nil {
			return err
		}
		if string(b) != "second" {
			return fmt.Errorf("%s = %q, want %q", secretFile, b, "second")
		}
		return nil
	})
	t.Logf("secret volume updated %.1f s after the Secret", time.Since(updated).Seconds())

	if err := admin.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	// Graceful deletion only marks the pod; the kubelet removes it once
	// its containers are gone, so NotFound proves the kubelet acted.
	waitKubelet(t, h, "pod deleted by the kubelet", func(ctx context.Context) error {
		_, err := admin.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("pod still exists")
	})
}

// waitKubelet polls check until it returns nil, and fails the test with
// its last error and the kubelet's log if kubeletTimeout passes or the
// kubelet exits first.
func waitKubelet(t *testing.T, h *HollowKubelet, what string, check func(context.Context) error) {
	t.Helper()
	last := fmt.Errorf("not checked yet")
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, kubeletTimeout, true, func(ctx context.Context) (bool, error) {
		if done, err := h.Process.Exited(); done {
			return false, fmt.Errorf("kubelet exited (%v)", err)
		}
		last = check(ctx)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last: %v); %s", what, err, last, h.Process.Describe())
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// vmRSS reads a process's resident set size as the kernel reports it.
func vmRSS(pid int) (string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			return strings.TrimSpace(rest), nil
		}
	}
	if err := s.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}
