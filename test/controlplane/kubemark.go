package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// nodeReadyTimeout bounds the wait for a hollow kubelet's Node to turn
// Ready. On two idle cores that is under a second from the process's
// start; the kubelet reports Ready only after its first runtime and PLEG
// checks, which a loaded machine running other test packages delays by
// far more, so the bound is generous.
const nodeReadyTimeout = 2 * time.Minute

// HollowKubelet is one kubemark --morph=kubelet process: the real kubelet
// code with a fake container runtime, fake mounter and fake cAdvisor, so it
// runs as an ordinary process without Docker, cgroups, mounts or root. It makes
// the same API requests a kubelet makes (registers its Node, renews its
// Lease, watches its pods, and the Secrets and ConfigMaps they use, and
// writes their volumes to disk), which is what a proxy in front of
// kube-apiserver has to serve.
type HollowKubelet struct {
	// Name is the node's name; the kubelet authenticates as
	// system:node:<Name> if Kubeconfig carries NodeKubeconfig's certificate.
	Name string
	// RootDir is the kubelet's --root-dir, which kubemark always creates
	// as /tmp/hollow-kubelet.<random> (pkg/kubemark hard-codes the base);
	// it holds pods/<uid>/volumes/... Stop removes it.
	RootDir string
	// Process is the kubemark process; its log is LogPath.
	Process *Process
	// Kubeconfig is the file the kubelet reaches the API with.
	Kubeconfig string
	// Port is the kubelet API (logs, exec, /healthz, /metrics, /pods). It
	// is plain HTTP without authentication and bound to 0.0.0.0: kubemark
	// sets no TLS and fixes the bind address.
	Port int
	// LogPath is the kubelet's log file, in HollowKubeletOptions.Dir.
	LogPath string

	// runtimeSocket is the fake container runtime's listening socket,
	// /tmp/kubelet_remote_<random>.sock, which kubemark never removes.
	runtimeSocket string
}

// HollowKubeletOptions choose how a hollow kubelet runs.
type HollowKubeletOptions struct {
	// Name is the node's name.
	Name string
	// Kubeconfig is what the kubelet uses to reach the API: from
	// NodeKubeconfig for kube-apiserver itself, or one pointing at a proxy
	// in front of it.
	Kubeconfig string
	// Dir receives the log. It is created if missing.
	Dir string
	// MaxPods caps the pods the node accepts; 0 keeps kubemark's 110.
	MaxPods int
	// NodeLabels are added to the node's labels at registration.
	NodeLabels map[string]string
	// ExtraArgs are appended to kubemark's command line, e.g. -v=4 or
	// --kube-api-qps (kubemark's default of 10 QPS is the kubelet's
	// default before 1.27, not today's 50).
	ExtraArgs []string
}

// StartHollowKubelet starts bin (kubemark, see EnsureTools) as the kubelet
// of opts.Name and returns once its API answers /healthz. It does not wait
// for the Node to register or turn Ready: see WaitNodeReady. The caller
// stops it; on error nothing is left running.
func StartHollowKubelet(ctx context.Context, bin string, opts HollowKubeletOptions) (*HollowKubelet, error) {
	if opts.Name == "" || opts.Kubeconfig == "" || opts.Dir == "" {
		return nil, errors.New("hollow kubelet: Name, Kubeconfig and Dir are required")
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("hollow kubelet %s directory: %w", opts.Name, err)
	}
	// The kubelet binds its port on 0.0.0.0 only once it has initialised,
	// seconds after FreePorts released it, and exits if another process
	// took it meanwhile; then start over on another port, as Start does.
	for attempt := 1; ; attempt++ {
		h, err := startHollowKubelet(ctx, bin, opts)
		if err == nil || attempt == startAttempts || !strings.Contains(err.Error(), "address already in use") {
			return h, err
		}
	}
}

func startHollowKubelet(ctx context.Context, bin string, opts HollowKubeletOptions) (_ *HollowKubelet, err error) {
	ports, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	h := &HollowKubelet{
		Name:       opts.Name,
		Kubeconfig: opts.Kubeconfig,
		Port:       ports[0],
		LogPath:    filepath.Join(opts.Dir, "kubelet.log"),
	}
	args := []string{
		"--morph=kubelet",
		"--name=" + opts.Name,
		"--kubeconfig=" + opts.Kubeconfig,
		"--kubelet-port=" + strconv.Itoa(h.Port),
		// 0 turns the read-only port off; its default, 10255, is one port
		// for every hollow kubelet on the machine.
		"--kubelet-read-only-port=0",
		// The default dials containerd's socket for images; the fake
		// runtime's own image service needs nothing from the host.
		"--use-host-image-service=false",
	}
	if opts.MaxPods > 0 {
		args = append(args, "--max-pods="+strconv.Itoa(opts.MaxPods))
	}
	if len(opts.NodeLabels) > 0 {
		labels := make([]string, 0, len(opts.NodeLabels))
		for k, v := range opts.NodeLabels {
			labels = append(labels, k+"="+v)
		}
		sort.Strings(labels)
		args = append(args, "--node-labels="+strings.Join(labels, ","))
	}
	args = append(args, opts.ExtraArgs...)
	if h.Process, err = StartProcess("hollow kubelet "+opts.Name, bin, args, h.LogPath); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			h.Stop()
		}
	}()
	err = WaitReady(ctx, h.Process, http.DefaultClient, "http://127.0.0.1:"+strconv.Itoa(h.Port)+"/healthz")
	// The fake runtime listens before the kubelet starts, so the socket
	// exists by now, and can be found only while the process lives.
	h.runtimeSocket = runtimeSocket(h.Process.Pid())
	if err != nil {
		// The root directory is made before the port is bound, so Stop
		// can clean it up even now.
		h.RootDir, _ = h.findRootDir()
		return nil, fmt.Errorf("hollow kubelet %s: %w", opts.Name, err)
	}
	if h.RootDir, err = h.findRootDir(); err != nil {
		return nil, fmt.Errorf("hollow kubelet %s: %w; %s", opts.Name, err, h.Process.Describe())
	}
	return h, nil
}

// rootDirLine is what pkg/kubemark logs once it has made the root
// directory, the only place kubemark says where that is.
var rootDirLine = regexp.MustCompile(`Using (/\S+) as root dir for hollow-kubelet`)

// findRootDir reads the root directory from the log. The log file is
// appended to by every start in the same Dir, so the last mention is this
// process's.
func (h *HollowKubelet) findRootDir() (string, error) {
	b, err := os.ReadFile(h.LogPath)
	if err != nil {
		return "", fmt.Errorf("read log for the root directory: %w", err)
	}
	m := rootDirLine.FindAllSubmatch(b, -1)
	if len(m) == 0 {
		return "", fmt.Errorf("no root directory named in %s", h.LogPath)
	}
	return string(m[len(m)-1][1]), nil
}

// runtimeSocket finds the fake runtime's socket among
// /tmp/kubelet_remote_*.sock by asking each which process listens on it
// (SO_PEERCRED): kubemark logs the path only at -v=3, other hollow kubelets
// have sockets there too, and /proc/<pid>/net/unix shows the temporary
// name the socket was bound to before it was renamed. It returns "" if it
// finds none.
func runtimeSocket(pid int) string {
	paths, _ := filepath.Glob("/tmp/kubelet_remote_*.sock")
	for _, path := range paths {
		if listenerPid(path) == pid {
			return path
		}
	}
	return ""
}

// listenerPid is the process that listens on the unix socket at path, or
// 0 if none answers.
func listenerPid(path string) int {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return 0
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return 0
	}
	return int(cred.Pid)
}

// WaitNodeReady polls, through client (one that may read Nodes, such as
// the admin's), until the kubelet's Node has condition Ready=True. It
// gives up after nodeReadyTimeout, or at once if the kubelet exits; the
// error has the last condition seen and the tail of the kubelet's log.
func (h *HollowKubelet) WaitNodeReady(ctx context.Context, client kubernetes.Interface) error {
	last := "not registered yet"
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, nodeReadyTimeout, true, func(ctx context.Context) (bool, error) {
		if done, err := h.Process.Exited(); done {
			return false, fmt.Errorf("kubelet exited (%v)", err)
		}
		node, err := client.CoreV1().Nodes().Get(ctx, h.Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return true, nil
				}
				last = fmt.Sprintf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not ready (last: %s): %w; %s", h.Name, last, err, h.Process.Describe())
	}
	return nil
}

// SecretVolumeFile is where the kubelet writes key of the secret volume
// named volume of pod podUID. The name is a symlink into the volume's
// current ..data directory, which the kubelet swaps atomically on update,
// so reading it always gives one whole version. The kubelet writes only
// volumes a container mounts: it skips the others, and does not fetch
// their Secrets.
func (h *HollowKubelet) SecretVolumeFile(podUID types.UID, volume, key string) string {
	return h.volumeFile("kubernetes.io~secret", podUID, volume, key)
}

// ConfigMapVolumeFile is SecretVolumeFile for a configMap volume.
func (h *HollowKubelet) ConfigMapVolumeFile(podUID types.UID, volume, key string) string {
	return h.volumeFile("kubernetes.io~configmap", podUID, volume, key)
}

// ProjectedVolumeFile is SecretVolumeFile for a projected volume, such as
// the kube-api-access-<random> one that holds a pod's ServiceAccount token.
func (h *HollowKubelet) ProjectedVolumeFile(podUID types.UID, volume, key string) string {
	return h.volumeFile("kubernetes.io~projected", podUID, volume, key)
}

// volumeFile follows the kubelet's layout,
// <root>/pods/<uid>/volumes/<plugin name with / escaped as ~>/<volume>.
func (h *HollowKubelet) volumeFile(plugin string, podUID types.UID, volume, key string) string {
	return filepath.Join(h.RootDir, "pods", string(podUID), "volumes", plugin, volume, key)
}

// PodResourcesSocket is the kubelet's PodResources API socket, in its
// root directory.
func (h *HollowKubelet) PodResourcesSocket() string {
	return filepath.Join(h.RootDir, "pod-resources", "kubelet.sock")
}

// podsTimeout bounds one request to a kubelet's /pods, which it answers
// from memory: a poll that called Pods with its whole deadline would
// otherwise see one stuck connection as the kubelet never answering.
const podsTimeout = 10 * time.Second

// Pods asks the kubelet which pods it has (its /pods, plain HTTP in
// kubemark); a static pod's status there is the kubelet's own.
func (h *HollowKubelet) Pods(ctx context.Context) ([]corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, podsTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(h.Port)+"/pods", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kubelet %s /pods: %w", h.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("kubelet %s /pods: %s", h.Name, resp.Status)
	}
	list := &corev1.PodList{}
	if err := json.NewDecoder(resp.Body).Decode(list); err != nil {
		return nil, fmt.Errorf("kubelet %s /pods: %w", h.Name, err)
	}
	return list.Items, nil
}

// Runs is nil when the kubelet has the pod of uid, Running.
func (h *HollowKubelet) Runs(ctx context.Context, uid types.UID) error {
	pods, err := h.Pods(ctx)
	if err != nil {
		return err
	}
	for _, p := range pods {
		if p.UID == uid {
			if p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("pod %s on kubelet %s: phase %s", uid, h.Name, p.Status.Phase)
			}
			return nil
		}
	}
	return fmt.Errorf("kubelet %s has no pod %s (%d pods)", h.Name, uid, len(pods))
}

// Stop ends the kubelet and removes its root directory and the fake
// runtime's socket, which would otherwise stay in /tmp. Its Node stays
// registered: without a controller-manager nothing marks it NotReady or
// deletes it. It is safe to call more than once.
func (h *HollowKubelet) Stop() {
	if h.Process != nil {
		h.Process.Stop()
	}
	// The fake mounter mounts nothing, so the tree is plain files.
	if h.RootDir != "" {
		_ = os.RemoveAll(h.RootDir)
	}
	if h.runtimeSocket != "" {
		_ = os.Remove(h.runtimeSocket)
	}
}

// NodeKubeconfig mints a client certificate for node's kubelet (see
// NodeConfig) and writes a kubeconfig with it to dir/<node>.kubeconfig,
// the form kubemark takes.
func (cp *ControlPlane) NodeKubeconfig(node, dir string) (string, error) {
	cfg, err := cp.NodeConfig(node)
	if err != nil {
		return "", fmt.Errorf("node %s credentials: %w", node, err)
	}
	path := filepath.Join(dir, node+".kubeconfig")
	if err := WriteKubeconfig(cfg, path); err != nil {
		return "", err
	}
	return path, nil
}
