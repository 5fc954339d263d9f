package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// proxySide is one way of running the nodes, measured.
type proxySide struct {
	// withoutNodes are kube-apiserver's long-running requests before the
	// nodes start; fromNodes what the nodes added, read after the churn
	// rounds, when every client has long settled on its path.
	withoutNodes, fromNodes controlplane.LongRunningRequests
	// rounds are the churn rounds in the order they ran.
	rounds  []churnRound
	restart restartResult
}

// proxyRun is what a side's steps share.
type proxyRun struct {
	env     *Env
	t       Target
	admin   kubernetes.Interface
	ns, way string
	nodes   []*HollowNode
	// watched and unwatched are the names of the EndpointSlices the
	// churn rounds change: the Services' own, which kube-proxy watches,
	// and as many labelled headless, which it does not.
	watched, unwatched []string
	// generation counts the churn's ticks, so that every tick writes
	// addresses no tick wrote before: an update that changes nothing is
	// no event.
	generation int
}

func runProxySide(ctx context.Context, env *Env, t Target, admin kubernetes.Interface, kubemark string, hubOwn controlplane.LongRunningRequests, fronted bool) (side proxySide, err error) {
	l := env.Proxies
	way := "direct"
	if fronted {
		way = "endpoints"
	}
	run := "bench-proxies-" + way + "-" + rand.String(6)
	dir, err := os.MkdirTemp("", run+"-")
	if err != nil {
		return side, err
	}
	s := &proxyRun{env: env, t: t, admin: admin, ns: run, way: way, nodes: make([]*HollowNode, l.Nodes)}
	defer func() {
		for _, n := range s.nodes {
			if n != nil {
				n.Stop()
			}
		}
		err = errors.Join(err, s.deleteObjects(ctx), cleanUp(ctx, admin, run))
		_ = os.RemoveAll(dir)
	}()

	// Each side starts from a kube-apiserver of its own, so that its RSS
	// holds this side's watches and nothing of the side before.
	env.progressf("proxies (%s): restarting kube-apiserver, so that the side starts from a fresh one", way)
	if err := t.Local.ControlPlane.RestartAPIServer(ctx); err != nil {
		return side, err
	}
	if err := waitWatchesBack(ctx, admin, hubOwn); err != nil {
		return side, err
	}
	if err := controlplane.EnsureNamespace(ctx, admin, s.ns, map[string]string{benchLabel: run}); err != nil {
		return side, err
	}
	if err := s.createServices(ctx); err != nil {
		return side, err
	}
	if side.withoutNodes, err = controlplane.ReadLongRunningRequests(ctx, admin.CoreV1().RESTClient()); err != nil {
		return side, err
	}
	if err := s.startNodes(ctx, kubemark, dir, fronted); err != nil {
		return side, err
	}
	if err := t.Local.ControlPlane.WaitHollowProxiesCaughtUp(ctx, s.proxies(), s.ns); err != nil {
		return side, err
	}
	if err := waitLeases(ctx, admin, s.nodes); err != nil {
		return side, err
	}

	// Pairs alternate which kind goes first, so that a drift weighs on
	// both kinds alike.
	k := 0
	for p := range l.Pairs {
		kinds := []bool{false, true}
		if p%2 == 1 {
			kinds = []bool{true, false}
		}
		for _, watched := range kinds {
			r, err := s.churn(ctx, k, watched)
			if err != nil {
				return side, fmt.Errorf("churn round %d: %w", k, err)
			}
			side.rounds = append(side.rounds, r)
			k++
		}
	}

	after, err := controlplane.ReadLongRunningRequests(ctx, admin.CoreV1().RESTClient())
	if err != nil {
		return side, err
	}
	side.fromNodes = after.Minus(side.withoutNodes)
	env.progressf("proxies (%s): long-running requests from the nodes: %s", way, side.fromNodes)
	if side.restart, err = s.restartAPIServer(ctx, hubOwn); err != nil {
		return side, fmt.Errorf("kube-apiserver restart: %w", err)
	}
	return side, nil
}

// startNodes starts every node, and returns once every kubelet's Node
// is Ready and every proxy has synced.
func (s *proxyRun) startNodes(ctx context.Context, kubemark, dir string, fronted bool) error {
	bar := s.env.phase(len(s.nodes), "proxies (%s): starting %d hollow kubelets and proxies", s.way, len(s.nodes))
	defer bar.Done()
	if err := startHollowNodes(ctx, s.t, s.admin, kubemark, dir, s.ns, s.nodes, HollowNodeSpec{Fronted: fronted, Proxy: true}, bar); err != nil {
		return err
	}
	if s.env.Proxies.Nice == 0 {
		return nil
	}
	for _, n := range s.nodes {
		for _, p := range []*controlplane.Process{n.Kubelet.Process, n.Proxy.Process} {
			if err := p.SetNice(s.env.Proxies.Nice); err != nil {
				return err
			}
		}
		if n.Endpoint != nil {
			if err := n.Endpoint.Process.SetNice(s.env.Proxies.Nice); err != nil {
				return err
			}
		}
	}
	return nil
}

// waitLeases waits until every kubelet of nodes holds its node Lease: a
// kubelet gets its Node, gets and creates the Lease a few seconds after
// it is Ready, and the first round measured would count that as its own.
func waitLeases(ctx context.Context, admin kubernetes.Interface, nodes []*HollowNode) error {
	var missing []string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		missing = missing[:0]
		for _, n := range nodes {
			if _, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, n.Name, metav1.GetOptions{}); err != nil {
				missing = append(missing, n.Name)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("node leases of %v: %w", missing, err)
	}
	return nil
}

func (s *proxyRun) proxies() []*controlplane.HollowProxy {
	var out []*controlplane.HollowProxy
	for _, n := range s.nodes {
		if n != nil && n.Proxy != nil {
			out = append(out, n.Proxy)
		}
	}
	return out
}

// createServices creates the Services and their EndpointSlices, one
// each, and the unwatched EndpointSlices, before the nodes start: the
// proxies list them, and the churn only changes them.
func (s *proxyRun) createServices(ctx context.Context) error {
	l := s.env.Proxies
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range l.Services {
		svc, quiet := fmt.Sprintf("svc-%d", i), fmt.Sprintf("quiet-%d", i)
		s.watched = append(s.watched, svc)
		s.unwatched = append(s.unwatched, quiet)
		g.Go(func() error {
			_, err := s.admin.CoreV1().Services(s.ns).Create(gctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: svc},
				Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
			}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create service %s: %w", svc, err)
			}
			if err := s.createSlice(gctx, svc, map[string]string{discoveryv1.LabelServiceName: svc}, s.address(i)); err != nil {
				return err
			}
			// kube-proxy's selector leaves out slices labelled headless
			// whatever the label's value, as the EndpointSlice controller
			// labels a headless Service's.
			return s.createSlice(gctx, quiet, map[string]string{discoveryv1.LabelServiceName: quiet, corev1.IsHeadlessService: ""}, s.address(i))
		})
	}
	return g.Wait()
}

func (s *proxyRun) createSlice(ctx context.Context, name string, labels map[string]string, address string) error {
	_, err := s.admin.DiscoveryV1().EndpointSlices(s.ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: labels},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{address}}},
		Ports:       []discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create endpointslice %s: %w", name, err)
	}
	return nil
}

// address is slice i's address at the current generation: distinct per
// slice (up to 256 of them) and per generation (up to 65,536).
func (s *proxyRun) address(i int) string {
	return fmt.Sprintf("10.%d.%d.%d", i%256, s.generation>>8%256, s.generation%256)
}

// deleteObjects deletes the side's EndpointSlices and Services: the
// harness has no namespace controller, so its namespace's deletion
// would leave them for the next side's proxies to list.
func (s *proxyRun) deleteObjects(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var errs []error
	if err := s.admin.DiscoveryV1().EndpointSlices(s.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete endpointslices in %s: %w", s.ns, err))
	}
	// Services have no deletecollection.
	for _, name := range s.watched {
		if err := s.admin.CoreV1().Services(s.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete service %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// waitWatchesBack waits, after a restart of kube-apiserver, until it
// holds at least the watches it held before any node ran (the hub's
// informers), each by verb and resource: until then a reading of
// long-running requests would miss some of the hub's.
func waitWatchesBack(ctx context.Context, admin kubernetes.Interface, before controlplane.LongRunningRequests) error {
	want := before.ByVerbResource()
	var missing []string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		now, err := controlplane.ReadLongRunningRequests(ctx, admin.CoreV1().RESTClient())
		if err != nil {
			missing = []string{err.Error()}
			return false, nil
		}
		got := now.ByVerbResource()
		missing = missing[:0]
		for k, n := range want {
			if got[k] < n {
				missing = append(missing, fmt.Sprintf("%s %d of %d", k, got[k], n))
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("kube-apiserver's long-running requests after its restart not back to the hub's own (%v): %w", missing, err)
	}
	return nil
}
