package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/forwarder"
)

// FailoverLoad shapes the failover scenario.
type FailoverLoad struct {
	// Conns are the clients (watchmux.Session, one websocket each), and
	// Channels each one's channels, one name-selected secret each.
	Conns, Channels int
	// WriteRate is secret updates per second, over all the secrets, round
	// robin.
	WriteRate int
	// Settle is how long writes go on before a replica goes, and after.
	Settle time.Duration
	// Rolling adds the rolling-restart run.
	Rolling bool
	// Endpoints adds a rolling restart whose clients are kubelet watches
	// through node endpoints (`nodeproxy node`, one process per
	// connection, Channels secrets each), where the local target has
	// the endpoint's command.
	Endpoints bool
}

// DefaultFailoverLoad is issue 13's shape: 20 connections of 50 channels,
// 200 writes a second (each secret updated every 5 s).
func DefaultFailoverLoad() FailoverLoad {
	return FailoverLoad{Conns: 20, Channels: 50, WriteRate: 200, Settle: 3 * time.Second, Rolling: true, Endpoints: true}
}

var failoverScenario = Scenario{
	Name: "failover",
	Help: "bulk watch clients (watchmux.Session) behind one address in front of two hub replicas: the replica they are on killed (SIGKILL), stopped (SIGTERM), " +
		"and both replaced in turn, under writes; events lost and repeated, 410s, time to resume (local control plane only)",
	RunAgainst: runFailover,
	LocalOnly:  true,
}

// failoverNamespace holds the scenario's secrets.
const failoverNamespace = "bench-failover"

// failoverDeliveryTimeout bounds the wait, once writes stop, for every
// channel to have received its secret's last write: an event still
// missing then is counted lost.
const failoverDeliveryTimeout = 30 * time.Second

func runFailover(ctx context.Context, env *Env, t Target) (*Result, error) {
	if t.Local == nil {
		return nil, errors.New("failover: needs the local control plane")
	}
	r := &Result{Scenario: "failover"}
	load := env.Failover
	kube, err := kubernetes.NewForConfig(t.Admin)
	if err != nil {
		return nil, fmt.Errorf("failover: %w", err)
	}
	names, err := createFailoverSecrets(ctx, env, kube, load.Conns*load.Channels)
	if err != nil {
		return interrupted(ctx, r, err)
	}
	kinds := []failoverKind{failKill, failTerm}
	if load.Rolling {
		kinds = append(kinds, failRolling)
	}
	if load.Endpoints && len(t.Local.NodeEndpoint) > 0 {
		kinds = append(kinds, failEndpoints)
	}
	for _, kind := range kinds {
		out, err := runFailoverOnce(ctx, env, t.Local, kube, names, kind)
		if out != nil {
			r.Figures = append(r.Figures, out.figures(kind)...)
			if kind != failEndpoints { // resumed inside the endpoints, untimed
				r.Latencies = append(r.Latencies, latencyOf(string(kind)+": replica gone to reopen acknowledged", out.resumeTimes))
			}
		}
		if err != nil {
			return interrupted(ctx, r, fmt.Errorf("failover %s: %w", kind, err))
		}
	}
	return r, nil
}

// failoverKind is how the replica goes.
type failoverKind string

const (
	failKill    failoverKind = "SIGKILL"
	failTerm    failoverKind = "SIGTERM"
	failRolling failoverKind = "rolling"
	// failEndpoints is the rolling restart under kubelet watches through
	// node endpoints.
	failEndpoints failoverKind = "rolling, node endpoints"
)

// failoverOutcome is what one run saw.
type failoverOutcome struct {
	channels, writes          int
	lost, duplicated, strange int
	expired, otherErrors      int
	resumed, lostInitial      int
	writeFailures             int
	resumeTimes               []time.Duration
	// Of the node-endpoint run: kubelet watches that ended and were
	// opened again, and those opened on kube-apiserver.
	watchRestarts, apiserverWatches int
}

func (o *failoverOutcome) figures(kind failoverKind) []Figure {
	p := string(kind) + ": "
	if kind == failEndpoints {
		return []Figure{
			{Name: p + "kubelet watches", Value: float64(o.channels)},
			{Name: p + "writes", Value: float64(o.writes)},
			{Name: p + "writes failed (their events count as never written)", Value: float64(o.writeFailures)},
			{Name: p + "channels carried over inside the endpoints", Value: float64(o.resumed)},
			{Name: p + "kubelet watches that ended and watched again", Value: float64(o.watchRestarts)},
			{Name: p + "kubelet watches opened on kube-apiserver", Value: float64(o.apiserverWatches)},
			{Name: p + "events lost", Value: float64(o.lost)},
			{Name: p + "events duplicated", Value: float64(o.duplicated)},
			{Name: p + "events never written", Value: float64(o.strange)},
			{Name: p + "watches ended 410 (relist)", Value: float64(o.expired)},
			{Name: p + "watches ended otherwise", Value: float64(o.otherErrors)},
		}
	}
	return []Figure{
		{Name: p + "channels", Value: float64(o.channels)},
		{Name: p + "writes", Value: float64(o.writes)},
		{Name: p + "writes failed (their events count as never written)", Value: float64(o.writeFailures)},
		{Name: p + "channels resumed", Value: float64(o.resumed)},
		{Name: p + "events lost", Value: float64(o.lost)},
		{Name: p + "events duplicated", Value: float64(o.duplicated)},
		{Name: p + "events never written", Value: float64(o.strange)},
		{Name: p + "channels ended 410 (relist)", Value: float64(o.expired)},
		{Name: p + "channels ended otherwise", Value: float64(o.otherErrors + o.lostInitial)},
	}
}

// createFailoverSecrets creates n secrets (or finds them from an earlier
// run) and returns their names.
func createFailoverSecrets(ctx context.Context, env *Env, kube kubernetes.Interface, n int) ([]string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: failoverNamespace}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create namespace %s: %w", failoverNamespace, err)
	}
	bar := env.phase(n, "failover: creating %d secrets", n)
	defer bar.Done()
	names := make([]string, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range n {
		names[i] = "failover-" + strconv.Itoa(i)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: failoverNamespace}, Data: map[string][]byte{"v": []byte("0")}}
			if _, err := kube.CoreV1().Secrets(failoverNamespace).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				errs <- fmt.Errorf("create secret %s: %w", names[i], err)
			}
			bar.Add(1)
		})
	}
	wg.Wait()
	close(errs)
	return names, <-errs
}

// replicas are the hub processes of one run behind the forwarder.
type replicas struct {
	fwd  *forwarder.Forwarder
	hub  *controlplane.Nodeproxy
	live map[string]*controlplane.Nodeproxy
	mu   sync.Mutex
}

func (rs *replicas) start(ctx context.Context, name string) (*controlplane.Nodeproxy, error) {
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		return nil, err
	}
	np, err := rs.hub.StartReplica(ctx, ports[0], name)
	if err != nil {
		return nil, fmt.Errorf("start replica %s: %w", name, err)
	}
	rs.mu.Lock()
	rs.live[name] = np
	rs.mu.Unlock()
	return np, nil
}

// stop takes replica name out of the forwarder's rotation (its endpoint
// leaves the Service), then ends it with kind's signal.
func (rs *replicas) stop(name string, kind failoverKind) {
	rs.mu.Lock()
	np := rs.live[name]
	delete(rs.live, name)
	rs.mu.Unlock()
	rs.fwd.Remove(addrOf(np))
	if kind == failKill {
		np.Process.Kill()
		return
	}
	np.Process.Terminate(time.Minute)
}

func (rs *replicas) stopAll() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for name, np := range rs.live {
		np.Process.Kill()
		delete(rs.live, name)
	}
}

func addrOf(np *controlplane.Nodeproxy) string { return "127.0.0.1:" + strconv.Itoa(np.Port) }

// runFailoverOnce runs two fresh replicas, A and B, behind a forwarder;
// opens the channels; writes; and, for SIGKILL and SIGTERM, ends A with
// every client on it; for rolling, spreads the clients over both and
// replaces A, then B, each by a new replica started first (a Deployment's
// surge of one). Then it compares what every channel received with what
// was written.
func runFailoverOnce(ctx context.Context, env *Env, local *Local, kube kubernetes.Interface, names []string, kind failoverKind) (*failoverOutcome, error) {
	load := env.Failover
	hub := local.Hub
	fwd, err := forwarder.Start()
	if err != nil {
		return nil, err
	}
	defer fwd.Close()
	rs := &replicas{fwd: fwd, hub: hub, live: map[string]*controlplane.Nodeproxy{}}
	defer rs.stopAll()
	// b first: the survivor has run longer than the clients' replica,
	// as in a deployment that has been up a while, so its change log
	// reaches back past every resourceVersion a client holds. (Started
	// after, its log would begin after the versions of the channels
	// that had no event yet, and those would get 410 from today's hub.)
	env.progressf("failover %s: starting replicas b and a", kind)
	b, err := rs.start(ctx, "failover-b")
	if err != nil {
		return nil, err
	}
	a, err := rs.start(ctx, "failover-a")
	if err != nil {
		return nil, err
	}
	rolling := kind == failRolling || kind == failEndpoints
	if rolling {
		fwd.SetBackends(addrOf(a), addrOf(b))
	} else {
		fwd.SetBackends(addrOf(a)) // every client on a
	}

	watch := newFailoverWatchers(len(names))
	var nodes *failoverNodes
	if kind == failEndpoints {
		var err error
		if nodes, err = watch.openThroughEndpoints(ctx, env, local, kube, "https://"+fwd.Addr(), load, names); err != nil {
			return nil, err
		}
		defer nodes.close()
	} else {
		cfg := &rest.Config{Host: "https://" + fwd.Addr(), TLSClientConfig: rest.TLSClientConfig{
			CAFile: hub.Files.CA, CertFile: hub.Files.AdminCert, KeyFile: hub.Files.AdminKey,
		}}
		if err := watch.open(ctx, env, cfg, load, names); err != nil {
			watch.close()
			return nil, err
		}
		defer watch.close()
	}
	fwd.SetBackends(addrOf(a), addrOf(b))

	w := newFailoverWriter(kube, names)
	wctx, stopWrites := context.WithCancel(ctx)
	writing := make(chan struct{})
	go func() { defer close(writing); w.run(wctx, load.WriteRate) }()
	sleepCtx(ctx, load.Settle)
	switch kind {
	case failKill, failTerm:
		env.progressf("failover %s: ending replica a with every client on it", kind)
		watch.stepStarted(time.Now())
		rs.stop("failover-a", kind)
	case failRolling, failEndpoints:
		for i, old := range []string{"failover-a", "failover-b"} {
			name := old + "2"
			env.progressf("failover rolling: replacing %s by %s", old, name)
			np, err := rs.start(ctx, name)
			if err != nil {
				stopWrites()
				<-writing
				return nil, err
			}
			fwd.Add(addrOf(np))
			watch.stepStarted(time.Now())
			rs.stop(old, failTerm)
			if i == 0 {
				sleepCtx(ctx, load.Settle)
			}
		}
	}
	sleepCtx(ctx, load.Settle)
	stopWrites()
	<-writing
	env.progressf("failover %s: writes stopped (%d); waiting for every channel to have the last", kind, w.total())
	watch.waitDelivered(ctx, w, failoverDeliveryTimeout)
	out := watch.compare(w)
	out.writeFailures = w.failures()
	if nodes != nil {
		apiserver, resumed, err := nodes.counts(ctx)
		if err != nil {
			return out, fmt.Errorf("scrape the node endpoints: %w", err)
		}
		out.apiserverWatches, out.resumed = int(apiserver), int(resumed)
		out.watchRestarts = int(nodes.restarts.Load())
	}
	return out, ctx.Err()
}

// sleepCtx sleeps d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}
