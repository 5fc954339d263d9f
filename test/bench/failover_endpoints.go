package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// failoverNodes are the clients of the node-endpoint run: one `nodeproxy
// node` process per node, in front of the hub's Service (the forwarder),
// and behind each, the kubelet's way of reading a secret: a list of the
// one object by name, then a watch from the list's resourceVersion, again
// from the last resourceVersion whenever the watch ends. What each watch
// received goes to the same channel logs as the Session clients', so that
// lost and repeated events are counted alike.
type failoverNodes struct {
	endpoints []*controlplane.NodeEndpoint
	clients   []*rest.Config
	dir       string
	cancel    context.CancelFunc
	readers   sync.WaitGroup
	// restarts counts kubelet watches that ended and were opened again:
	// through the hub, none should.
	restarts atomic.Int64
}

// openThroughEndpoints starts load.Conns node endpoints, each standing for
// a node whose one pod mounts load.Channels of the secrets, and follows
// every secret as that node's kubelet would, into w's logs.
func (w *failoverWatchers) openThroughEndpoints(ctx context.Context, env *Env, local *Local, kube kubernetes.Interface, hubURL string, load FailoverLoad, names []string) (*failoverNodes, error) {
	// The pods need the namespace's default ServiceAccount, which no
	// controller makes on the local control plane.
	if err := local.ControlPlane.EnsureNamespace(ctx, failoverNamespace); err != nil {
		return nil, fmt.Errorf("failover endpoints: %w", err)
	}
	dir, err := os.MkdirTemp("", "nodeproxy-bench-failover-")
	if err != nil {
		return nil, fmt.Errorf("failover endpoints: %w", err)
	}
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	nodes := &failoverNodes{dir: dir, cancel: cancel,
		endpoints: make([]*controlplane.NodeEndpoint, load.Conns), clients: make([]*rest.Config, load.Conns)}
	bar := env.phase(load.Conns, "failover: starting %d node endpoints", load.Conns)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4) // each start is a burst of CPU; 2 cores
	for i := range load.Conns {
		node := failoverNode(i)
		mine := names[i*load.Channels : (i+1)*load.Channels]
		g.Go(func() error {
			defer bar.Add(1)
			if err := createFailoverPod(gctx, kube, node, mine); err != nil {
				return err
			}
			e, err := local.ControlPlane.StartNodeEndpoint(gctx, local.NodeEndpoint, node, filepath.Join(dir, node), hubURL)
			if err != nil {
				return err
			}
			nodes.endpoints[i] = e
			cfg, err := clientcmd.BuildConfigFromFlags("", e.KubeletKubeconfig)
			if err != nil {
				return fmt.Errorf("kubeconfig of %s: %w", node, err)
			}
			cfg.QPS, cfg.Burst = -1, 0 // the kubelet's own limits are not what is measured
			nodes.clients[i] = cfg
			return nil
		})
	}
	err = g.Wait()
	bar.Done()
	if err != nil {
		nodes.close()
		return nil, err
	}
	opened := env.phase(len(names), "failover: %d kubelet watches through the endpoints", len(names))
	defer opened.Done()
	for i, cfg := range nodes.clients {
		kubelet, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			nodes.close()
			return nil, fmt.Errorf("client of %s: %w", failoverNode(i), err)
		}
		for j := range load.Channels {
			k := i*load.Channels + j
			nodes.readers.Go(func() { w.logs[k].follow(fctx, kubelet, failoverNamespace, names[k], &nodes.restarts, false) })
		}
	}
	for i, l := range w.logs {
		for !l.hasInitial() {
			if ctx.Err() != nil {
				nodes.close()
				return nil, ctx.Err()
			}
			if l.ended() {
				nodes.close()
				return nil, fmt.Errorf("the kubelet watch of %s ended before it began: %v", names[i], l.final)
			}
			sleepCtx(ctx, 10*time.Millisecond)
		}
		opened.Add(1)
	}
	return nodes, nil
}

func failoverNode(i int) string { return "failover-node-" + strconv.Itoa(i) }

// createFailoverPod binds a pod that mounts secrets to node, so that the
// hub's graph lets node read them.
func createFailoverPod(ctx context.Context, kube kubernetes.Interface, node string, secrets []string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: failoverNamespace},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			AutomountServiceAccountToken: new(false),
			Containers:                   []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	for i, s := range secrets {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{
			Name: "s" + strconv.Itoa(i), VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: s}},
		})
	}
	if _, err := kube.CoreV1().Pods(failoverNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the pod of %s: %w", node, err)
	}
	return nil
}

// follow reads secret name of namespace ns as the kubelet's secret
// manager does, until ctx ends: list it by name, watch from the list's
// resourceVersion, and watch again from the last one it received
// whenever a watch ends. A 410 ends the log (the kubelet would list
// again; its later writes are not owed), unless relist: then it lists
// again, as the kubelet's reflector does, and notes what the list held
// (channelLog.listed).
func (l *channelLog) follow(ctx context.Context, kubelet kubernetes.Interface, ns, name string, restarts *atomic.Int64, relist bool) {
	secrets := kubelet.CoreV1().Secrets(ns)
	byName := "metadata.name=" + name
	for again := false; ctx.Err() == nil; again = true {
		list, err := secrets.List(ctx, metav1.ListOptions{FieldSelector: byName})
		if err != nil {
			if ctx.Err() == nil {
				l.end(errorStatus(err))
			}
			return
		}
		l.mu.Lock()
		l.initial = true
		if again {
			l.relists++
			for _, item := range list.Items {
				v, _ := strconv.ParseUint(item.ResourceVersion, 10, 64)
				l.listed = append(l.listed, v)
			}
		}
		l.mu.Unlock()
		if !l.watchFrom(ctx, secrets, byName, list.ResourceVersion, restarts, relist) {
			return
		}
	}
}

// watchFrom watches from rv, again from the last resourceVersion
// received whenever a watch ends, until ctx ends or an ERROR comes; it
// returns true when the ERROR was a 410 and relist is set: the caller
// lists again.
func (l *channelLog) watchFrom(ctx context.Context, secrets corev1client.SecretInterface, byName, rv string, restarts *atomic.Int64, relist bool) bool {
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			restarts.Add(1)
		}
		w, err := secrets.Watch(ctx, metav1.ListOptions{FieldSelector: byName, ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if ctx.Err() == nil {
				l.end(errorStatus(err))
			}
			return false
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				w.Stop()
				err := apierrors.FromObject(ev.Object)
				if relist && apierrors.IsResourceExpired(err) || relist && apierrors.IsGone(err) {
					return true
				}
				l.end(errorStatus(err))
				return false
			}
			m, err := meta.Accessor(ev.Object)
			if err != nil {
				continue
			}
			rv = m.GetResourceVersion()
			if ev.Type == watch.Bookmark {
				continue
			}
			v, _ := strconv.ParseUint(rv, 10, 64)
			l.mu.Lock()
			l.rvs = append(l.rvs, v)
			l.max = max(l.max, v)
			l.mu.Unlock()
		}
	}
	return false
}

func (l *channelLog) end(s metav1.Status) {
	l.mu.Lock()
	l.final = &s
	l.mu.Unlock()
}

func errorStatus(err error) metav1.Status {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status()
	}
	return metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInternalServerError, Message: err.Error()}
}

// counts sums, over the endpoints, the kubelet watches of
// secrets that went to kube-apiserver instead of the hub, and the
// channels carried over to another replica.
func (n *failoverNodes) counts(ctx context.Context) (apiserverWatches, resumed float64, err error) {
	for i, e := range n.endpoints {
		client, err := rest.HTTPClientFor(n.clients[i])
		if err != nil {
			return 0, 0, err
		}
		m, err := Scrape(ctx, client, e.URL+"/metrics")
		if err != nil {
			return 0, 0, err
		}
		apiserverWatches += m.Sum("nodeproxy_node_requests_total", "path", "apiserver", "resource", "secrets", "verb", "watch")
		resumed += m.Sum("nodeproxy_watchmux_client_resumes_total", "outcome", "reopened")
	}
	return apiserverWatches, resumed, nil
}

func (n *failoverNodes) close() {
	n.cancel()
	n.readers.Wait()
	for _, e := range n.endpoints {
		if e != nil {
			e.Process.Stop()
		}
	}
	_ = os.RemoveAll(n.dir)
}
