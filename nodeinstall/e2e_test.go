package nodeinstall_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/nodeproxy/nodeproxy/endpoint"
	"github.com/nodeproxy/nodeproxy/nodeinstall"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(testserver.RunTests(m, controlplane.Options{}, &cp))
}

// kubelet is a hollow kubelet that the test restarts as systemd would.
type kubelet struct {
	t          *testing.T
	bin, name  string
	kubeconfig string
	dir        string

	mu      sync.Mutex
	h       *controlplane.HollowKubelet // guarded by mu
	started time.Time                   // guarded by mu
}

func (k *kubelet) restart(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.h != nil {
		k.h.Stop()
	}
	h, err := controlplane.StartHollowKubelet(ctx, k.bin, controlplane.HollowKubeletOptions{Name: k.name, Kubeconfig: k.kubeconfig, Dir: k.dir})
	if err != nil {
		return err
	}
	k.h, k.started = h, time.Now()
	return nil
}

func (k *kubelet) current() (*controlplane.HollowKubelet, time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.h, k.started
}

// staticPod runs the endpoint as the kubelet would run the manifest
// install wrote: its container's arguments, parsed by the flags of the
// image's entrypoint (nodeproxy-node), in this process.
func staticPod(t *testing.T, manifest string) (stop func()) {
	t.Helper()
	raw, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(raw, &pod); err != nil {
		t.Fatal(err)
	}
	o := endpoint.NewOptions()
	fs := pflag.NewFlagSet("nodeproxy-node", pflag.ContinueOnError)
	for _, set := range o.Flags().FlagSets {
		fs.AddFlagSet(set)
	}
	if err := fs.Parse(pod.Spec.Containers[0].Args); err != nil || fs.NArg() > 0 {
		t.Fatalf("the static pod's arguments: %v (left over: %v)", err, fs.Args())
	}
	if err := o.Complete(); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg, addr, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	e, err := endpoint.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx, ln) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// TestInstallOnANode: a hollow kubelet on its own kubeconfig; install
// puts the endpoint (its static pod) in front of it; the endpoint goes
// away and the kubelet is sent back to kube-apiserver without a person;
// the endpoint returns and so does the kubelet; uninstall restores the
// kubelet's own kubeconfig. Through it all, the pod's secret file follows
// the Secret.
func TestInstallOnANode(t *testing.T) {
	ctx := context.Background()
	tools, err := controlplane.EnsureTools(ctx, os.Stderr, "kubemark")
	if err != nil {
		t.Fatal(err)
	}
	testserver.InstallRBAC(t, cp, "rbac-webhook.yaml", "rbac-bulk.yaml")
	// The hub has a CA of its own, which the endpoint must be given.
	hubCA, err := controlplane.NewCA(t.TempDir(), "hub")
	if err != nil {
		t.Fatal(err)
	}
	hub := testserver.Start(t, cp, testserver.Options{ServingCA: hubCA})
	hub.WaitReady(t, 90*time.Second)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	name := "installed-node"

	// A kubeadm node's files, under a temporary directory.
	root := t.TempDir()
	at := func(p string) string { return filepath.Join(root, p) }
	pem := at("/var/lib/kubelet/pki/kubelet-client-current.pem")
	kp, err := cp.ClientCA.ClientCert("system:node:"+name, []string{"system:nodes"}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(pem), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pem, append(kp.CertPEM, kp.KeyPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := nodeinstall.DefaultConfig()
	cfg.KubeletKubeconfig, cfg.DirectKubeconfig = at("/etc/kubernetes/kubelet.conf"), at("/etc/kubernetes/kubelet-direct.conf")
	cfg.ManifestPath, cfg.CertDir = at("/etc/kubernetes/manifests/nodeproxy-node.yaml"), at("/var/lib/nodeproxy/pki")
	cfg.ClientCAFile, cfg.NodeName, cfg.Image, cfg.HubURL = cp.ClientCA.CertPath, name, "nodeproxy:test", hub.URL
	cfg.HubCAFile = hubCA.CertPath
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Port = ports[0]
	if err := controlplane.WriteKubeconfig(&rest.Config{Host: cp.URL, TLSClientConfig: rest.TLSClientConfig{
		CAFile: cp.ServingCA.CertPath, CertFile: pem, KeyFile: pem}}, cfg.KubeletKubeconfig); err != nil {
		t.Fatal(err)
	}
	original, err := os.ReadFile(cfg.KubeletKubeconfig)
	if err != nil {
		t.Fatal(err)
	}

	k := &kubelet{t: t, bin: tools["kubemark"], name: name, kubeconfig: cfg.KubeletKubeconfig, dir: t.TempDir()}
	t.Cleanup(func() {
		if h, _ := k.current(); h != nil {
			h.Stop()
		}
		_ = admin.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	cfg.RestartKubelet = k.restart
	if err := k.restart(ctx); err != nil {
		t.Fatal(err)
	}
	// heard waits until the kubelet, started last, has renewed its Lease:
	// it reaches kube-apiserver by whatever its kubeconfig says now.
	heard := func(what string) {
		t.Helper()
		testserver.Eventually(t, 2*time.Minute, what, func(ctx context.Context) error {
			_, started := k.current()
			lease, err := admin.CoordinationV1().Leases("kube-node-lease").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if lease.Spec.RenewTime == nil || lease.Spec.RenewTime.Time.Before(started.Truncate(time.Second)) {
				return fmt.Errorf("lease last renewed %v, kubelet started %v", lease.Spec.RenewTime, started)
			}
			return nil
		})
	}
	heard("the kubelet on its own kubeconfig")

	ns := "installed"
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		StringData: map[string]string{"password": "v1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{
			NodeName: name, AutomountServiceAccountToken: new(false),
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
				VolumeMounts: []corev1.VolumeMount{{Name: "creds", MountPath: "/etc/creds"}}}},
			Volumes: []corev1.Volume{{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	password := func(want string) {
		t.Helper()
		if want != "v1" {
			s, err := admin.CoreV1().Secrets(ns).Get(ctx, "creds", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			s.StringData = map[string]string{"password": want}
			if _, err := admin.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		testserver.Eventually(t, 2*time.Minute, "the secret file holding "+want, func(context.Context) error {
			h, _ := k.current()
			b, err := os.ReadFile(h.SecretVolumeFile(pod.UID, "creds", "password"))
			if err != nil {
				return err
			}
			if string(b) != want {
				return fmt.Errorf("holds %q", b)
			}
			return nil
		})
	}
	password("v1")

	// The DaemonSet's first run: the static pod is written; the kubelet
	// would start it, the test does.
	installed := make(chan error, 1)
	go func() { installed <- nodeinstall.Install(ctx, cfg) }()
	testserver.Eventually(t, 30*time.Second, "the static pod manifest", func(context.Context) error {
		_, err := os.Stat(cfg.ManifestPath)
		return err
	})
	stopEndpoint := staticPod(t, cfg.ManifestPath)
	if err := <-installed; err != nil {
		t.Fatal(err)
	}
	heard("the kubelet through its endpoint")
	password("v2 through the endpoint")

	// The endpoint goes away: the kubelet is sent back to kube-apiserver.
	rctx, stopReconciling := context.WithCancel(ctx)
	reconciled := make(chan error, 1)
	go func() { reconciled <- nodeinstall.Reconcile(rctx, cfg, 200*time.Millisecond, 2*time.Second) }()
	stopEndpoint()
	testserver.Eventually(t, time.Minute, "the kubelet's own kubeconfig back", func(context.Context) error {
		now, err := os.ReadFile(cfg.KubeletKubeconfig)
		if err != nil {
			return err
		}
		if string(now) != string(original) {
			return errors.New("the kubelet still points at the endpoint")
		}
		return nil
	})
	heard("the kubelet back on kube-apiserver")
	password("v3 with the endpoint gone")

	// It returns: so does the kubelet.
	staticPod(t, cfg.ManifestPath)
	testserver.Eventually(t, time.Minute, "the kubelet pointed at the endpoint again", func(context.Context) error {
		now, err := os.ReadFile(cfg.KubeletKubeconfig)
		if err != nil {
			return err
		}
		if string(now) == string(original) {
			return errors.New("the kubelet still uses its own kubeconfig")
		}
		return nil
	})
	heard("the kubelet through its endpoint again")
	password("v4 through the endpoint again")
	stopReconciling()
	if err := <-reconciled; err != nil {
		t.Fatal(err)
	}

	if err := nodeinstall.Uninstall(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.ReadFile(cfg.KubeletKubeconfig); string(now) != string(original) {
		t.Fatalf("uninstall left the kubelet with:\n%s", now)
	}
	heard("the kubelet on its own kubeconfig after uninstall")
	password("v5 after uninstall")
}
