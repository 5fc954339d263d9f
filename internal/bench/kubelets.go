package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/internal/controlplane"
)

// KubeletLoad shapes the kubelets scenario.
type KubeletLoad struct {
	// Nodes is how many hollow kubelets run, each about 80 MB.
	Nodes int
	// PodsPerNode are bound to each.
	PodsPerNode int
	// ObjectsPerPod are the secrets and configmaps (half each, secrets
	// first) each pod mounts, its own.
	ObjectsPerPod int
	// Idle is how long the servers and endpoints are watched with
	// nothing changing, after the updates.
	Idle time.Duration
}

// DefaultKubeletLoad is the floor: 20 kubelets, pods with at
// least 5 secrets and configmaps.
func DefaultKubeletLoad() KubeletLoad {
	return KubeletLoad{Nodes: 20, PodsPerNode: 2, ObjectsPerPod: 6, Idle: 30 * time.Second}
}

var kubeletsScenario = Scenario{
	Name: "kubelets",
	Help: "real kubelet code (hollow kubelets) running pods that mount secrets and configmaps: straight on kube-apiserver, then each behind a nodeproxy node endpoint " +
		"(local control plane only: run from a checkout)",
	RunAgainst: runKubelets,
	LocalOnly:  true,
}

// kubeletSide is one way of running the kubelets, measured.
type kubeletSide struct {
	// watches are kube-apiserver's secrets and configmaps watches added
	// with the kubelets and their pods, goroutines its goroutines added.
	watches, goroutines float64
	// api and hub are the servers' usage while the pods came up and
	// through the round of updates.
	apiUp, apiUpdates, hubUp, hubUpdates time.Duration
	// apiIdle and endpointIdle (the mean per endpoint) are CPU while
	// nothing changes but what the kubelets do by themselves.
	apiIdle, endpointIdle time.Duration
	apiRSSAdded           int64
	// upTook is from creating the pods to the last one Running.
	upTook time.Duration
	// latencies are from a secret's update to its file's new content,
	// for every pod that mounts it.
	latencies []time.Duration
	// endpointRSS is each node endpoint's resident memory, fronted only.
	endpointRSS []int64
}

func runKubelets(ctx context.Context, env *Env, t Target) (*Result, error) {
	if t.Local == nil {
		return nil, errors.New("kubelets runs hollow kubelets and node endpoints on this machine: it needs the local control plane, not --kubeconfig")
	}
	if len(t.Local.NodeEndpoint) == 0 {
		return nil, errors.New("kubelets needs a nodeproxy binary to run as node endpoints")
	}
	l := env.Kubelets
	tools, err := controlplane.EnsureTools(ctx, env.Progress, "kubemark")
	if err != nil {
		return nil, err
	}
	r := &Result{Scenario: "kubelets"}
	direct, err := runKubeletSide(ctx, env, t, tools["kubemark"], false)
	if err != nil {
		return interrupted(ctx, r, fmt.Errorf("kubelets straight on kube-apiserver: %w", err))
	}
	fronted, err := runKubeletSide(ctx, env, t, tools["kubemark"], true)
	if err != nil {
		return interrupted(ctx, r, fmt.Errorf("kubelets behind node endpoints: %w", err))
	}
	secs := func(d time.Duration) float64 { return d.Seconds() }
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	var epSum, epMax int64
	for _, b := range fronted.endpointRSS {
		epSum += b
		epMax = max(epMax, b)
	}
	r.Figures = []Figure{
		{"hollow kubelets", float64(l.Nodes), ""},
		{"pods", float64(l.Nodes * l.PodsPerNode), ""},
		{"secrets and configmaps mounted", float64(l.Nodes * l.PodsPerNode * l.ObjectsPerPod), ""},
		{"their watches on kube-apiserver, direct", direct.watches, ""},
		{"their watches on kube-apiserver, behind endpoints", fronted.watches, ""},
		{"kube-apiserver goroutines added, direct", direct.goroutines, ""},
		{"kube-apiserver goroutines added, behind endpoints", fronted.goroutines, ""},
		{"kube-apiserver CPU, pods up, direct", secs(direct.apiUp), "s"},
		{"kube-apiserver CPU, pods up, behind endpoints", secs(fronted.apiUp), "s"},
		{"hub CPU, pods up, behind endpoints", secs(fronted.hubUp), "s"},
		{"kube-apiserver CPU, updates, direct", secs(direct.apiUpdates), "s"},
		{"kube-apiserver CPU, updates, behind endpoints", secs(fronted.apiUpdates), "s"},
		{"hub CPU, updates, behind endpoints", secs(fronted.hubUpdates), "s"},
		{fmt.Sprintf("kube-apiserver CPU, idle %s, direct", l.Idle), secs(direct.apiIdle), "s"},
		{fmt.Sprintf("kube-apiserver CPU, idle %s, behind endpoints", l.Idle), secs(fronted.apiIdle), "s"},
		{fmt.Sprintf("endpoint CPU per node, idle %s, mean", l.Idle), secs(fronted.endpointIdle), "s"},
		{"kube-apiserver RSS added, direct", mib(direct.apiRSSAdded), "MiB"},
		{"kube-apiserver RSS added, behind endpoints", mib(fronted.apiRSSAdded), "MiB"},
		{"time to all pods Running, direct", secs(direct.upTook), "s"},
		{"time to all pods Running, behind endpoints", secs(fronted.upTook), "s"},
		{"endpoint RSS per node, mean", mib(epSum / int64(max(len(fronted.endpointRSS), 1))), "MiB"},
		{"endpoint RSS per node, max", mib(epMax), "MiB"},
	}
	r.Latencies = []Latency{
		latencyOf("secret update to file, direct", direct.latencies),
		latencyOf("secret update to file, behind endpoints", fronted.latencies),
	}
	return r, nil
}

// hollowNode is one node of a side: its kubelet, and its endpoint when
// fronted.
type hollowNode struct {
	name     string
	kubelet  *controlplane.HollowKubelet
	endpoint *controlplane.NodeEndpoint
}

func (n *hollowNode) stop() {
	if n.kubelet != nil {
		n.kubelet.Stop()
	}
	if n.endpoint != nil {
		n.endpoint.Process.Stop()
	}
}

// mountedFile is one secret's file in one pod.
type mountedFile struct {
	path   string
	secret string
}

func runKubeletSide(ctx context.Context, env *Env, t Target, kubemark string, fronted bool) (side kubeletSide, err error) {
	l := env.Kubelets
	way := "direct"
	if fronted {
		way = "endpoints"
	}
	run := "bench-kubelets-" + way + "-" + rand.String(6)
	admin, err := kubernetes.NewForConfig(t.Admin)
	if err != nil {
		return side, err
	}
	dir, err := os.MkdirTemp("", run+"-")
	if err != nil {
		return side, err
	}
	nodes := make([]*hollowNode, l.Nodes)
	defer func() {
		for _, n := range nodes {
			if n != nil {
				n.stop()
			}
		}
		err = errors.Join(err, cleanUp(ctx, admin, run))
		_ = os.RemoveAll(dir)
	}()
	ns := run
	if err := controlplane.EnsureNamespace(ctx, admin, ns, map[string]string{benchLabel: run}); err != nil {
		return side, err
	}
	watchesBefore, goroutinesBefore, err := kubeletWatches(ctx, t)
	if err != nil {
		return side, err
	}
	rssBefore, err := t.APIServer.Usage()
	if err != nil {
		return side, err
	}

	bar := env.phase(l.Nodes, "kubelets (%s): starting %d hollow kubelets", way, l.Nodes)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4) // each start is a burst of CPU; 2 cores
	for i := range nodes {
		name := fmt.Sprintf("%s-%d", run, i)
		n := &hollowNode{name: name}
		nodes[i] = n
		g.Go(func() error {
			defer bar.Add(1)
			nodeDir := filepath.Join(dir, name)
			kubeconfig, err := t.Local.ControlPlane.NodeKubeconfig(name, dir)
			if err != nil {
				return err
			}
			if fronted {
				if n.endpoint, err = t.Local.ControlPlane.StartNodeEndpoint(gctx, t.Local.NodeEndpoint, name, nodeDir, t.Local.Hub.URL); err != nil {
					return err
				}
				kubeconfig = n.endpoint.KubeletKubeconfig
			}
			n.kubelet, err = controlplane.StartHollowKubelet(gctx, kubemark, controlplane.HollowKubeletOptions{
				Name: name, Kubeconfig: kubeconfig, Dir: nodeDir, NodeLabels: map[string]string{benchLabel: run},
			})
			if err != nil {
				return err
			}
			return n.kubelet.WaitNodeReady(gctx, admin)
		})
	}
	err = g.Wait()
	bar.Done()
	if err != nil {
		return side, err
	}

	apiStart, hubStart, err := serverUsage(t)
	if err != nil {
		return side, err
	}
	began := time.Now()
	var files []mountedFile
	var secrets []string
	for i, n := range nodes {
		for p := range l.PodsPerNode {
			pod := fmt.Sprintf("pod-%d-%d", i, p)
			var volumes []corev1.Volume
			var mounts []corev1.VolumeMount
			for o := range l.ObjectsPerPod {
				name := fmt.Sprintf("%s-%d", pod, o)
				var src corev1.VolumeSource
				if o < (l.ObjectsPerPod+1)/2 {
					if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
						StringData: map[string]string{"value": "v1"}}, metav1.CreateOptions{}); err != nil {
						return side, err
					}
					src.Secret = &corev1.SecretVolumeSource{SecretName: name}
					secrets = append(secrets, name)
				} else {
					if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
						Data: map[string]string{"value": "v1"}}, metav1.CreateOptions{}); err != nil {
						return side, err
					}
					src.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}
				}
				volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: src})
				mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: "/mnt/" + name})
			}
			spec := simulatedPod(ns, pod, n.name, volumes)
			spec.Spec.Containers[0].VolumeMounts = mounts
			created, err := admin.CoreV1().Pods(ns).Create(ctx, spec, metav1.CreateOptions{})
			if err != nil {
				return side, err
			}
			for o := range (l.ObjectsPerPod + 1) / 2 {
				name := fmt.Sprintf("%s-%d", pod, o)
				files = append(files, mountedFile{path: n.kubelet.SecretVolumeFile(created.UID, name, "value"), secret: name})
			}
		}
	}
	env.progressf("kubelets (%s): %d pods created; waiting for them to run", way, l.Nodes*l.PodsPerNode)
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning {
				return false, nil
			}
		}
		return len(pods.Items) == l.Nodes*l.PodsPerNode, nil
	}); err != nil {
		return side, fmt.Errorf("pods not Running: %w", err)
	}
	side.upTook = time.Since(began)
	apiUp, hubUp, err := serverUsage(t)
	if err != nil {
		return side, err
	}
	side.apiUp, side.hubUp = apiUp.CPU-apiStart.CPU, hubUp.CPU-hubStart.CPU
	side.apiRSSAdded = apiUp.RSS - rssBefore.RSS
	watchesUp, goroutinesUp, err := kubeletWatches(ctx, t)
	if err != nil {
		return side, err
	}
	side.watches, side.goroutines = watchesUp-watchesBefore, goroutinesUp-goroutinesBefore

	env.progressf("kubelets (%s): updating %d secrets", way, len(secrets))
	updated := make(map[string]time.Time, len(secrets))
	var mu sync.Mutex
	for _, name := range secrets {
		s, err := admin.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return side, err
		}
		s.StringData = map[string]string{"value": "v2"}
		mu.Lock()
		updated[name] = time.Now()
		mu.Unlock()
		if _, err := admin.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			return side, err
		}
	}
	pending := files
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		now := time.Now()
		left := pending[:0]
		for _, f := range pending {
			if b, err := os.ReadFile(f.path); err == nil && string(b) == "v2" {
				side.latencies = append(side.latencies, now.Sub(updated[f.secret]))
				continue
			}
			left = append(left, f)
		}
		pending = left
		return len(pending) == 0, nil
	}); err != nil {
		return side, fmt.Errorf("%d of %d files without the update: %w", len(pending), len(files), err)
	}
	apiDone, hubDone, err := serverUsage(t)
	if err != nil {
		return side, err
	}
	side.apiUpdates, side.hubUpdates = apiDone.CPU-apiUp.CPU, hubDone.CPU-hubUp.CPU

	env.progressf("kubelets (%s): idle for %s", way, l.Idle)
	endpointsBefore, err := endpointUsage(nodes)
	if err != nil {
		return side, err
	}
	select {
	case <-time.After(l.Idle):
	case <-ctx.Done():
		return side, ctx.Err()
	}
	apiIdle, _, err := serverUsage(t)
	if err != nil {
		return side, err
	}
	side.apiIdle = apiIdle.CPU - apiDone.CPU
	endpointsAfter, err := endpointUsage(nodes)
	if err != nil {
		return side, err
	}
	if len(endpointsAfter) > 0 {
		var cpu time.Duration
		for i, u := range endpointsAfter {
			cpu += u.CPU - endpointsBefore[i].CPU
			side.endpointRSS = append(side.endpointRSS, u.RSS)
		}
		side.endpointIdle = cpu / time.Duration(len(endpointsAfter))
	}
	return side, nil
}

// endpointUsage reads every node endpoint's usage; none when the nodes
// have no endpoints.
func endpointUsage(nodes []*hollowNode) ([]Usage, error) {
	var out []Usage
	for _, n := range nodes {
		if n.endpoint == nil {
			continue
		}
		u, err := ReadUsage(n.endpoint.Process.Pid())
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

// kubeletWatches is kube-apiserver's count of secrets and configmaps
// watches now, and of its goroutines.
func kubeletWatches(ctx context.Context, t Target) (watches, goroutines float64, err error) {
	m, err := t.APIServer.Metrics(ctx)
	if err != nil {
		return 0, 0, err
	}
	return m.Sum("apiserver_longrunning_requests", "verb", "WATCH", "resource", "secrets") +
		m.Sum("apiserver_longrunning_requests", "verb", "WATCH", "resource", "configmaps"), m.Sum("go_goroutines"), nil
}

// serverUsage reads kube-apiserver's and the hub's usage, both on this
// machine.
func serverUsage(t Target) (api, hub Usage, err error) {
	if api, err = t.APIServer.Usage(); err != nil {
		return api, hub, err
	}
	hub, err = t.Nodeproxy.Usage()
	return api, hub, err
}
