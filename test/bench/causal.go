package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

var causalScenario = Scenario{
	Name: "causal",
	Help: "pods bound at --causal-rate, each with a fresh Secret; each node reads the Secret through kube-apiserver the moment its pod watch shows the pod: " +
		"refusals with nodeproxy's webhook on 2 hub replicas vs the in-tree Node authorizer, each on 2 kube-apiservers sharing one etcd",
	RunAgainst: runCausal,
	LocalOnly:  true,
}

// CausalLoad shapes the causal scenario.
type CausalLoad struct {
	// Nodes the pods are spread over, each watching its pods on both sides.
	Nodes int
	// Pods created, one fresh Secret each.
	Pods int
	// Rate is pods created per second.
	Rate int
}

// DefaultCausalLoad: 300 pods at 20/s over 10 nodes, 15 s of steady
// binding, each node getting a pod every half second.
func DefaultCausalLoad() CausalLoad { return CausalLoad{Nodes: 10, Pods: 300, Rate: 20} }

// webhookUser is the identity kube-apiserver presents to nodeproxy's
// webhook: the subject of manifests/base/rbac-webhook.yaml.
const webhookUser = "kube-apiserver-nodeproxy-webhook"

// causalSide is one authorizer setup: its nodes watch their pods through
// one kube-apiserver and read the pods' secrets through another, as
// kubelets behind a load balancer over an HA control plane may.
type causalSide struct {
	name              string
	watchVia, readVia func(node string) (*rest.Config, error)

	mu      sync.Mutex
	took    []time.Duration // guarded by mu: from the pod's ADDED to the read's answer
	refused int             // guarded by mu
	failed  []error         // guarded by mu: answers other than 200 and 403
}

func (s *causalSide) record(took time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.took = append(s.took, took)
	switch {
	case err == nil:
	case apierrors.IsForbidden(err):
		s.refused++
	default:
		s.failed = append(s.failed, err)
	}
}

func (s *causalSide) reads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.took)
}

// runCausal is issue 13's causal measurement. One etcd; kube-apiserver
// A1 (the local control plane's) and a peer A2, both with the in-tree
// Node authorizer; peers B1 and B2 whose node decisions go to nodeproxy's
// webhook, B1's to the local hub H1 and B2's to a second replica H2, each
// replica with its own cache and graph. Pods are created at the load's
// rate, each bound to a node and mounting a Secret created just before
// it. On each side every node watches its pods through the first
// kube-apiserver and, the moment the pod appears, reads its Secret
// through the second, whose authorizer learned of the pod through watches
// of its own: a refusal is a graph behind what the node was shown.
func runCausal(ctx context.Context, env *Env, t Target) (*Result, error) {
	r := &Result{Scenario: "causal"}
	load := env.Causal
	if t.Local == nil {
		return nil, errors.New("causal: needs the local control plane (it starts kube-apiservers of its own)")
	}
	cp, h1 := t.Local.ControlPlane, t.Local.Hub
	root, err := controlplane.RepoRoot()
	if err != nil {
		return nil, err
	}
	env.progressf("causal: starting a second hub replica and three more kube-apiservers on the same etcd")
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		return nil, err
	}
	h2, err := cp.StartNodeproxy(ctx, h1.Process.Binary(), ports[0])
	if err != nil {
		return nil, fmt.Errorf("causal: second hub replica: %w", err)
	}
	defer h2.Process.Stop()
	webhookConfig := filepath.Join(root, filepath.FromSlash(controlplane.AuthorizationConfigManifest))
	var peers []*controlplane.PeerAPIServer
	defer func() {
		for _, p := range peers {
			p.Process.Stop()
		}
	}()
	for _, p := range []struct {
		name string
		hub  *controlplane.Nodeproxy // nil: the in-tree Node authorizer
	}{{"intree-2", nil}, {"webhook-1", h1}, {"webhook-2", h2}} {
		var authz func(*controlplane.ControlPlane) (*apiserverv1.AuthorizationConfiguration, error) // nil: Node, RBAC
		if p.hub != nil {
			// The shipped configuration, its decision cache included.
			authz = controlplane.WebhookAuthorization(webhookConfig, p.hub.URL+"/authorize", webhookUser, true)
		}
		peer, err := cp.StartPeerAPIServer(ctx, p.name, authz)
		if err != nil {
			return interrupted(ctx, r, fmt.Errorf("causal: kube-apiserver %s: %w", p.name, err))
		}
		peers = append(peers, peer)
	}
	intree2, webhook1, webhook2 := peers[0], peers[1], peers[2]
	via := func(p *controlplane.PeerAPIServer) func(string) (*rest.Config, error) {
		return func(node string) (*rest.Config, error) {
			cfg, err := cp.NodeConfig(node)
			if err != nil || p == nil {
				return cfg, err
			}
			return p.Config(cfg), nil
		}
	}
	sides := []*causalSide{
		{name: "in-tree Node authorizer", watchVia: via(nil), readVia: via(intree2)},
		{name: "nodeproxy webhook", watchVia: via(webhook1), readVia: via(webhook2)},
	}

	admin, err := kubernetes.NewForConfig(t.Admin)
	if err != nil {
		return nil, err
	}
	run := fmt.Sprintf("causal-%d", time.Now().Unix())
	ns := run
	if err := controlplane.EnsureNamespace(ctx, admin, ns, map[string]string{benchLabel: run}); err != nil {
		return nil, err
	}
	defer func() {
		_ = admin.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), ns, metav1.DeleteOptions{})
	}()
	nodes := make([]string, load.Nodes)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("%s-node-%d", run, i)
	}

	refreshedBefore, err := hubSums(ctx, h1, h2)
	if err != nil {
		return nil, err
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	var watchers sync.WaitGroup
	defer watchers.Wait()
	defer stopWatching()
	for _, s := range sides {
		for _, node := range nodes {
			w, read, err := s.open(watchCtx, node, ns)
			if err != nil {
				return interrupted(ctx, r, fmt.Errorf("causal: %s: node %s: %w", s.name, node, err))
			}
			watchers.Go(func() { s.follow(watchCtx, w, read, ns) })
		}
	}

	bar := env.phase(load.Pods, "causal: binding %d pods at %d/s over %d nodes, each node reading the pod's secret on both sides", load.Pods, load.Rate, load.Nodes)
	interval := time.Second / time.Duration(load.Rate)
	start := time.Now()
	created := 0
	for i := range load.Pods {
		if ctx.Err() != nil {
			break
		}
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		name := fmt.Sprintf("p-%d", i)
		if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			return interrupted(ctx, r, fmt.Errorf("causal: create secret %s: %w", name, err))
		}
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{
				NodeName:   nodes[i%len(nodes)],
				Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
				Volumes:    []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name}}}},
			},
		}, metav1.CreateOptions{}); err != nil {
			return interrupted(ctx, r, fmt.Errorf("causal: create pod %s: %w", name, err))
		}
		created++
		bar.Add(1)
	}
	rate := float64(created) / time.Since(start).Seconds()
	bar.Done()
	// Every pod is read once on each side; wait for the last answers.
	deadline := time.Now().Add(time.Minute)
	for _, s := range sides {
		for s.reads() < created && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	stopWatching()
	refreshedAfter, err := hubSums(ctx, h1, h2)
	if err != nil {
		return nil, err
	}

	r.Figures = append(r.Figures, Figure{Name: "pods bound", Value: float64(created)},
		Figure{Name: "binding rate achieved", Value: rate, Unit: "/s"})
	for _, s := range sides {
		s.mu.Lock()
		r.Figures = append(r.Figures,
			Figure{Name: s.name + ": reads", Value: float64(len(s.took))},
			Figure{Name: s.name + ": reads refused (403)", Value: float64(s.refused)})
		if len(s.failed) > 0 {
			r.Figures = append(r.Figures, Figure{Name: s.name + ": reads failed otherwise", Value: float64(len(s.failed))})
			env.progressf("causal: %s: %d reads failed, the first: %v", s.name, len(s.failed), s.failed[0])
		}
		r.Latencies = append(r.Latencies, latencyOf(s.name+": pod seen to secret read", s.took))
		s.mu.Unlock()
	}
	r.Figures = append(r.Figures, Figure{Name: "nodeproxy: refusals a lagging graph would have made, avoided",
		Value: refreshedAfter.avoided - refreshedBefore.avoided})
	for _, result := range refreshResults {
		if n := refreshedAfter.rounds[result] - refreshedBefore.rounds[result]; n > 0 || result == "ok" {
			r.Figures = append(r.Figures, Figure{Name: "nodeproxy: lists of a node's pods, " + result, Value: n})
		}
	}
	if ctx.Err() != nil {
		return interrupted(ctx, r, ctx.Err())
	}
	return r, nil
}

// open starts node's watch of its pods and returns it with the client
// its reads go through.
func (s *causalSide) open(ctx context.Context, node, ns string) (watch.Interface, kubernetes.Interface, error) {
	clients := make([]kubernetes.Interface, 2)
	for i, cfg := range []func(string) (*rest.Config, error){s.watchVia, s.readVia} {
		c, err := cfg(node)
		if err != nil {
			return nil, nil, err
		}
		if clients[i], err = kubernetes.NewForConfig(c); err != nil {
			return nil, nil, err
		}
	}
	w, err := clients[0].CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return nil, nil, fmt.Errorf("watch its pods: %w", err)
	}
	return w, clients[1], nil
}

// follow reads each new pod's secret the moment the watch shows the pod.
func (s *causalSide) follow(ctx context.Context, w watch.Interface, read kubernetes.Interface, ns string) {
	defer w.Stop()
	var reads sync.WaitGroup
	defer reads.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.ResultChan():
			if !ok {
				return
			}
			pod, isPod := e.Object.(*corev1.Pod)
			if e.Type != watch.Added || !isPod || len(pod.Spec.Volumes) == 0 || pod.Spec.Volumes[0].Secret == nil {
				continue
			}
			seen, secret := time.Now(), pod.Spec.Volumes[0].Secret.SecretName
			reads.Go(func() {
				_, err := read.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
				if ctx.Err() == nil {
					s.record(time.Since(seen), err)
				}
			})
		}
	}
}

// refreshResults are the results of nodeproxy_authorizer_refresh_rounds_total.
var refreshResults = []string{"ok", "timeout", "throttled", "error"}

// refreshSums is what the hubs say of their refusal checks.
type refreshSums struct {
	// avoided: node refusals their graphs would have made, turned into
	// allows by the check.
	avoided float64
	// rounds by result: lists of a node's pods.
	rounds map[string]float64
}

// hubSums scrapes the hubs' refusal-check counters and sums them.
func hubSums(ctx context.Context, hubs ...*controlplane.Nodeproxy) (refreshSums, error) {
	s := refreshSums{rounds: map[string]float64{}}
	for _, h := range hubs {
		m, err := Scrape(ctx, h.Admin, h.URL+"/metrics")
		if err != nil {
			return s, fmt.Errorf("causal: scrape %s: %w", h.URL, err)
		}
		s.avoided += m.Sum("nodeproxy_authorizer_refreshed_decisions_total", "result", "allowed")
		for _, r := range refreshResults {
			s.rounds[r] += m.Sum("nodeproxy_authorizer_refresh_rounds_total", "result", r)
		}
	}
	return s, nil
}
