package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// kubeletSide is one way of running the kubelets, measured.
type kubeletSide struct {
	// watches are kube-apiserver's secrets and configmaps watches added
	// with the kubelets and their mounting pods, once the rounds are
	// over.
	watches float64
	// rounds are in the order they ran, each meant to last roundLength.
	rounds      []kubeletRound
	roundLength time.Duration
	// apiIdle and endpointIdle (the mean per endpoint) are CPU while
	// nothing changes but what the kubelets do by themselves.
	apiIdle, endpointIdle time.Duration
	// endpointRSS is each node endpoint's resident memory, fronted only.
	endpointRSS []int64
}

// sideRun is what a side's rounds share.
type sideRun struct {
	env     *Env
	t       Target
	admin   kubernetes.Interface
	ns, way string
	nodes   []*HollowNode
	// secrets are every pod's secrets, by pod: [node][pod][]name.
	secrets [][][]string
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
	s := &sideRun{env: env, t: t, admin: admin, ns: run, way: way, nodes: make([]*HollowNode, l.Nodes)}
	defer func() {
		for _, n := range s.nodes {
			if n != nil {
				n.Stop()
			}
		}
		err = errors.Join(err, cleanUp(ctx, admin, run))
		_ = os.RemoveAll(dir)
	}()
	if err := controlplane.EnsureNamespace(ctx, admin, s.ns, map[string]string{benchLabel: run}); err != nil {
		return side, err
	}
	watchesBefore, err := lastingWatches(ctx, func(ctx context.Context) (float64, error) { return kubeletWatches(ctx, t) })
	if err != nil {
		return side, err
	}
	if err := s.startNodes(ctx, kubemark, dir, fronted); err != nil {
		return side, err
	}
	if err := s.createObjects(ctx); err != nil {
		return side, err
	}

	// Pairs alternate which kind goes first, so that a drift (kube-apiserver's
	// caches and heap settling over minutes) weighs on both kinds alike.
	side.roundLength = l.Round
	k := 0
	for p := range l.Pairs {
		kinds := []bool{false, true}
		if p%2 == 1 {
			slices.Reverse(kinds)
		}
		for _, mounting := range kinds {
			r, err := s.round(ctx, k, mounting)
			if err != nil {
				return side, fmt.Errorf("round %d: %w", k, err)
			}
			side.rounds = append(side.rounds, r)
			k++
		}
	}

	env.progressf("kubelets (%s): mounting pods running, idle for %s", way, l.Idle)
	if _, err := s.createPods(ctx, k, true); err != nil {
		return side, err
	}
	if err := s.waitPods(ctx, k, corev1.PodRunning); err != nil {
		return side, err
	}
	watchesUp, err := lastingWatches(ctx, func(ctx context.Context) (float64, error) { return kubeletWatches(ctx, t) })
	if err != nil {
		return side, err
	}
	side.watches = watchesUp - watchesBefore
	apiBefore, _, err := serverUsage(t)
	if err != nil {
		return side, err
	}
	endpointsBefore, err := endpointUsage(s.nodes)
	if err != nil {
		return side, err
	}
	select {
	case <-time.After(l.Idle):
	case <-ctx.Done():
		return side, ctx.Err()
	}
	apiAfter, _, err := serverUsage(t)
	if err != nil {
		return side, err
	}
	side.apiIdle = apiAfter.CPU - apiBefore.CPU
	endpointsAfter, err := endpointUsage(s.nodes)
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

// startNodes starts every hollow kubelet, each behind its own endpoint
// when fronted, and waits for their nodes to be Ready.
func (s *sideRun) startNodes(ctx context.Context, kubemark, dir string, fronted bool) error {
	bar := s.env.phase(len(s.nodes), "kubelets (%s): starting %d hollow kubelets", s.way, len(s.nodes))
	defer bar.Done()
	return startHollowNodes(ctx, s.t, s.admin, kubemark, dir, s.ns, s.nodes, HollowNodeSpec{Fronted: fronted}, bar)
}

// createObjects creates every pod's secrets and configmaps once, before
// the rounds: creating them is the workload's cost, not the kubelets'.
func (s *sideRun) createObjects(ctx context.Context) error {
	l := s.env.Kubelets
	s.secrets = make([][][]string, l.Nodes)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range l.Nodes {
		s.secrets[i] = make([][]string, l.PodsPerNode)
		for p := range l.PodsPerNode {
			for o := range l.ObjectsPerPod {
				name := objectName(i, p, o)
				if isSecret(l, o) {
					s.secrets[i][p] = append(s.secrets[i][p], name)
				}
				g.Go(func() error {
					var err error
					if isSecret(l, o) {
						_, err = s.admin.CoreV1().Secrets(s.ns).Create(gctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
							StringData: map[string]string{"value": "v"}}, metav1.CreateOptions{})
					} else {
						_, err = s.admin.CoreV1().ConfigMaps(s.ns).Create(gctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
							Data: map[string]string{"value": "v"}}, metav1.CreateOptions{})
					}
					if err != nil {
						return fmt.Errorf("create %s: %w", name, err)
					}
					return nil
				})
			}
		}
	}
	return g.Wait()
}

// objectName is the name of pod p of node i's object o.
func objectName(i, p, o int) string { return fmt.Sprintf("obj-%d-%d-%d", i, p, o) }

// isSecret says whether a pod's object o is a secret: the first half
// are, the rest are configmaps.
func isSecret(l KubeletLoad, o int) bool { return o < (l.ObjectsPerPod+1)/2 }
