package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// Target is a cluster with nodeproxy serving bulk.k8s.io in front of it:
// what the scenarios that need kube-apiserver measure. It is either the
// local control plane this machine runs (LocalTarget: both servers are
// processes here, measured from /proc) or any cluster a kubeconfig
// reaches (KubeconfigTarget: kube-apiserver measured from its /metrics,
// nodeproxy not at all).
type Target struct {
	// Admin creates, updates and deletes the workload.
	Admin *rest.Config
	// Node returns node's credentials to kube-apiserver.
	Node func(node string) (*rest.Config, error)
	// Bulk returns node's credentials to nodeproxy's bulk API: nodeproxy
	// itself, as a node-local endpoint reaches it, or kube-apiserver's
	// aggregator.
	Bulk func(node string) (*rest.Config, error)
	// APIServer measures kube-apiserver; Nodeproxy measures nodeproxy, and
	// is the zero Server when this machine cannot reach its process.
	APIServer, Nodeproxy Server
	// Local is the control plane on this machine, for the scenarios that
	// run programs of their own against it; nil for --kubeconfig.
	Local *Local
}

// Local is a control plane this process started, with the hub in front.
type Local struct {
	ControlPlane *controlplane.ControlPlane
	Hub          *controlplane.Nodeproxy
	// NodeEndpoint is the command that runs a node endpoint (see
	// controlplane.NodeEndpointCommand); nil when there is none.
	NodeEndpoint []string
}

// Server measures one server process.
type Server struct {
	// Metrics scrapes its /metrics.
	Metrics func(ctx context.Context) (Metrics, error)
	// Usage reads its CPU time and resident memory; nil reads them from
	// the process_* series of its /metrics.
	Usage func() (Usage, error)
}

// Measured reports whether s can be measured at all.
func (s Server) Measured() bool { return s.Metrics != nil }

// sample scrapes s and reads its usage.
func (s Server) sample(ctx context.Context) (Usage, Metrics, error) {
	m, err := s.Metrics(ctx)
	if err != nil {
		return Usage{}, nil, err
	}
	if s.Usage == nil {
		return usageOf(m), m, nil
	}
	u, err := s.Usage()
	return u, m, err
}

// LocalTarget is cp with np in front of it, both processes on this
// machine. Nodes reach nodeproxy directly with their certificates, as a
// node-local endpoint does.
func LocalTarget(cp *controlplane.ControlPlane, np *controlplane.Nodeproxy, nodeEndpoint []string) (Target, error) {
	admin, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return Target{}, fmt.Errorf("admin client: %w", err)
	}
	return Target{
		Admin: cp.AdminConfig(),
		Node:  cp.NodeConfig,
		Bulk:  np.NodeConfig,
		APIServer: Server{
			Metrics: func(ctx context.Context) (Metrics, error) { return ScrapeAPIServer(ctx, admin.CoreV1().RESTClient()) },
			Usage:   func() (Usage, error) { return ReadUsage(cp.APIServer().Pid()) },
		},
		Nodeproxy: Server{
			Metrics: func(ctx context.Context) (Metrics, error) { return Scrape(ctx, np.Admin, np.URL+"/metrics") },
			Usage:   func() (Usage, error) { return ReadUsage(np.Process.Pid()) },
		},
		Local: &Local{ControlPlane: cp, Hub: np, NodeEndpoint: nodeEndpoint},
	}, nil
}

// KubeconfigTarget is the cluster admin reaches, with nodeproxy
// registered as its bulk.k8s.io APIService. Nodes are played by
// impersonation (admin must be allowed to impersonate users and groups,
// as cluster-admin is), each over its own connection as a kubelet's
// requests are; their bulk requests go through kube-apiserver's
// aggregator. kube-apiserver is measured from its /metrics; nodeproxy,
// which may run anywhere in the cluster, is not measured.
func KubeconfigTarget(admin *rest.Config) (Target, error) {
	admin = rest.CopyConfig(admin)
	// The workload is created in bursts; client-go's default of 5 QPS
	// would measure the client's limiter.
	admin.QPS, admin.Burst = 1000, 2000
	kube, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return Target{}, fmt.Errorf("client for %s: %w", admin.Host, err)
	}
	node := func(name string) (*rest.Config, error) {
		cfg := rest.CopyConfig(admin)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + name, Groups: []string{"system:nodes", "system:authenticated"}}
		// A dialer of its own keeps client-go from sharing one cached
		// transport, and so one connection, among every node.
		cfg.Dial = (&net.Dialer{}).DialContext
		return cfg, nil
	}
	return Target{
		Admin: admin,
		Node:  node,
		Bulk:  node,
		APIServer: Server{Metrics: func(ctx context.Context) (Metrics, error) {
			return ScrapeAPIServer(ctx, kube.CoreV1().RESTClient())
		}},
	}, nil
}

// usageOf reads a Go process's usage from the process collector's series
// every Prometheus client exposes.
func usageOf(m Metrics) Usage {
	return Usage{
		CPU: secondsToDuration(m.Sum("process_cpu_seconds_total")),
		RSS: int64(m.Sum("process_resident_memory_bytes")),
	}
}

func secondsToDuration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// benchLabel marks what a run creates with the run's name, so that it can
// be found and removed, here or by an operator after a crash:
//
//	kubectl delete ns,nodes -l bench.nodeproxy.io/run
const benchLabel = "bench.nodeproxy.io/run"

// simulatedTaint keeps real pods off the nodes a run simulates.
const simulatedTaint = "bench.nodeproxy.io/simulated"

// createNode registers a simulated node, so that a real cluster's pod
// garbage collector does not delete pods bound to it as orphans; the
// taint keeps the scheduler from placing real pods there.
func createNode(ctx context.Context, admin kubernetes.Interface, name, run string) error {
	_, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{benchLabel: run}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: simulatedTaint, Effect: corev1.TaintEffectNoSchedule}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	return nil
}

// simulatedPod is a pod bound to a simulated node: it tolerates every
// taint (a real cluster's node lifecycle controller marks nodes without a
// kubelet unreachable, and would evict it) and mounts no token, so it
// uses exactly the volumes given.
func simulatedPod(ns, name, node string, volumes []corev1.Volume) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			Containers:                   []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
			Volumes:                      volumes,
			Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			AutomountServiceAccountToken: ptr.To(false),
		},
	}
}

// cleanUp deletes what run created: its namespaces (and so everything in
// them) and its nodes. It runs even after Ctrl-C, with a minute of its
// own.
func cleanUp(ctx context.Context, admin kubernetes.Interface, run string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	sel := metav1.ListOptions{LabelSelector: benchLabel + "=" + run}
	var errs []error
	nss, err := admin.CoreV1().Namespaces().List(ctx, sel)
	if err != nil {
		return fmt.Errorf("clean up run %s: %w", run, err)
	}
	for _, ns := range nss.Items {
		if err := admin.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if err := admin.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("clean up run %s (kubectl delete ns,nodes -l %s=%s): %w", run, benchLabel, run, err)
	}
	return nil
}
