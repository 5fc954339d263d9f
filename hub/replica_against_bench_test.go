package hub_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/workload"
)

// replicaWritersEnv is how many writers create the replica's objects in
// kube-apiserver at once (default 32): enough that kube-apiserver's
// throughput, not one writer's round trips, bounds the rate
// (docs/benchmarks.md, "A replica at 1,000,000 pods", has the rates
// measured with more and fewer).
const replicaWritersEnv = "NODEPROXY_REPLICA_WRITERS"

// BenchmarkReplicaHeapAgainstKubeAPIServer is BenchmarkReplicaHeap's
// replica made through a real kube-apiserver, with a real `nodeproxy
// serve` process in front (built from this tree) taking it in through its
// reflectors: each namespace and its ServiceAccount, each Deployment's
// Secret and ConfigMap, then each pod created bound to its node and its
// status then written as its kubelet writes it once running, by
// NODEPROXY_REPLICA_WRITERS writers. It reports what the hub's go_gc_heap_live_bytes
// grew by (the median of three forced collections before and after,
// once the hub has heard every write), to compare with
// BenchmarkReplicaHeap's replica-MiB at the same NODEPROXY_REPLICA_PODS
// (default 2,000), and how fast the harness took the writes. Then it
// starts a second hub, which takes the same objects in as lists, and
// reports the peak resident memory of each (peak-RSS-MiB,
// started-peak-RSS-MiB) and the second's live heap once ready.
//
//	NODEPROXY_REPLICA_PODS=50000 go test ./hub -run '^$' -bench ReplicaHeapAgainstKubeAPIServer -benchtime 1x -timeout 60m
func BenchmarkReplicaHeapAgainstKubeAPIServer(b *testing.B) {
	r := workload.ReplicaOf(positiveEnv(b, replicaPodsEnv, 2000))
	ctx := context.Background()
	bin, err := controlplane.BuildNodeproxy(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		b.Fatal(err)
	}
	np, err := cp.StartNodeproxy(ctx, bin, ports[0])
	if err != nil {
		b.Fatal(err)
	}
	defer np.Process.Stop()
	cfg := cp.AdminConfig()
	// client-go's default of 5 requests a second would bound the rate,
	// not kube-apiserver.
	cfg.QPS, cfg.Burst = -1, 0
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		// The control plane is this test binary's own; the objects stay
		// until it stops with the binary, and a second iteration would
		// find them there.
		if b.N > 1 {
			b.Fatal("the replica is made once: run with -benchtime 1x")
		}
		before, err := hubLiveHeap(ctx, np)
		if err != nil {
			b.Fatal(err)
		}
		heard, err := hubEvents(ctx, np)
		if err != nil {
			b.Fatal(err)
		}
		made, err := makeReplica(ctx, b, admin, r)
		if err != nil {
			b.Fatal(err)
		}
		if err := waitHubHeard(ctx, np, heard+float64(made)); err != nil {
			b.Fatal(err)
		}
		after, err := hubLiveHeap(ctx, np)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric((after-before)/(1<<20), "replica-MiB")
		b.ReportMetric(after/(1<<20), "live-MiB")
		b.ReportMetric(float64(r.Pods), "pods")
		peak, err := peakRSS(np.Process.Pid())
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(peak)/(1<<20), "peak-RSS-MiB")

		// A replica started now takes the same objects in as one list
		// a type, not as events: what it peaks at on its way to ready.
		if err := reportStartedReplica(ctx, b, np); err != nil {
			b.Fatal(err)
		}
	}
}

// reportStartedReplica starts a second hub beside np, waits until it is
// ready (every type listed) and reports its peak resident memory
// (VmHWM) and its live heap then: a reflector holds a type's whole list
// decoded until it hands it to the store, so a replica's start, or a
// relist, peaks above what it keeps.
func reportStartedReplica(ctx context.Context, b *testing.B, np *controlplane.Nodeproxy) error {
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		return err
	}
	started, err := np.StartReplica(ctx, ports[0], "nodeproxy-started")
	if err != nil {
		return err
	}
	defer started.Process.Stop()
	peak, err := peakRSS(started.Process.Pid())
	if err != nil {
		return err
	}
	live, err := hubLiveHeap(ctx, started)
	if err != nil {
		return err
	}
	b.ReportMetric(float64(peak)/(1<<20), "started-peak-RSS-MiB")
	b.ReportMetric(live/(1<<20), "started-live-MiB")
	return nil
}

// peakRSS is the process's peak resident memory, in bytes.
func peakRSS(pid int) (int64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("process %d: VmHWM %q: %w", pid, v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// makeReplica creates r's objects through kube-apiserver and returns how
// many writes it made, reporting the pods' rate.
func makeReplica(ctx context.Context, b *testing.B, c kubernetes.Interface, r workload.Replica) (writes int, err error) {
	writers := positiveEnv(b, replicaWritersEnv, 32)
	each := func(n int, what string, f func(ctx context.Context, i int) error) error {
		g, ctx := errgroup.WithContext(ctx)
		g.SetLimit(writers)
		for i := range n {
			g.Go(func() error {
				if err := f(ctx, i); err != nil {
					return fmt.Errorf("%s %d: %w", what, i, err)
				}
				return nil
			})
		}
		return g.Wait()
	}
	create := metav1.CreateOptions{}
	steps := []struct {
		what string
		n    int
		f    func(ctx context.Context, i int) error
	}{
		{"namespace", r.Namespaces(), func(ctx context.Context, n int) error {
			_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.Namespace(n)}}, create)
			if err != nil {
				return err
			}
			sa := r.ServiceAccount(n)
			_, err = c.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, sa, create)
			return err
		}},
		{"secret", r.Deployments, func(ctx context.Context, d int) error {
			s := r.Secret(d)
			_, err := c.CoreV1().Secrets(s.Namespace).Create(ctx, s, create)
			return err
		}},
		{"configmap", r.Deployments, func(ctx context.Context, d int) error {
			m := r.ConfigMap(d)
			_, err := c.CoreV1().ConfigMaps(m.Namespace).Create(ctx, m, create)
			return err
		}},
		{"pod", r.Pods, func(ctx context.Context, i int) error {
			p := r.CreatedPod(i)
			created, err := c.CoreV1().Pods(p.Namespace).Create(ctx, p, create)
			if err != nil {
				return err
			}
			created.Status = r.RunningPod(i).Status
			_, err = c.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
			return err
		}},
	}
	for _, s := range steps {
		start := time.Now()
		if err := each(s.n, s.what, s.f); err != nil {
			return 0, err
		}
		if s.what == "pod" {
			b.ReportMetric(float64(s.n)/time.Since(start).Seconds(), "pods/s")
		}
	}
	// The hub hears the ServiceAccounts, Secrets and ConfigMaps once each
	// and the pods twice; it caches no namespaces.
	return r.Namespaces() + 2*r.Deployments + 2*r.Pods, nil
}

// hubLiveHeap is the hub's go_gc_heap_live_bytes, the median of three
// readings each right after a collection forced through its
// /debug/pprof/heap?gc=1: one reading also holds what the hub had in
// flight at that moment, which the median leaves out.
func hubLiveHeap(ctx context.Context, np *controlplane.Nodeproxy) (float64, error) {
	var heaps []float64
	for i := range 3 {
		if i > 0 {
			time.Sleep(time.Second)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, np.URL+"/debug/pprof/heap?gc=1", nil)
		if err != nil {
			return 0, err
		}
		resp, err := np.Admin.Do(req)
		if err != nil {
			return 0, fmt.Errorf("force a collection in the hub: %w", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("force a collection in the hub: %s", resp.Status)
		}
		m, err := controlplane.Scrape(ctx, np.Admin, np.URL+"/metrics")
		if err != nil {
			return 0, err
		}
		if _, ok := m["go_gc_heap_live_bytes"]; !ok {
			return 0, fmt.Errorf("the hub's /metrics has no go_gc_heap_live_bytes")
		}
		heaps = append(heaps, m.Sum("go_gc_heap_live_bytes"))
	}
	slices.Sort(heaps)
	return heaps[1], nil
}

// hubEvents is how many changes the hub's cache has taken in from its
// watches, of every type.
func hubEvents(ctx context.Context, np *controlplane.Nodeproxy) (float64, error) {
	m, err := controlplane.Scrape(ctx, np.Admin, np.URL+"/metrics")
	if err != nil {
		return 0, err
	}
	return m.Sum("nodeproxy_cache_events_total"), nil
}

// waitHubHeard waits until the hub's cache has taken in want changes:
// the heap after is then the replica's, not part of it.
func waitHubHeard(ctx context.Context, np *controlplane.Nodeproxy, want float64) error {
	var last float64
	err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		if last, err = hubEvents(ctx, np); err != nil {
			return false, nil
		}
		return last >= want, nil
	})
	if err != nil {
		return fmt.Errorf("the hub heard %.0f changes, not %.0f: %w", last, want, err)
	}
	return nil
}
