package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/shard"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// shardView is one node's view, followed as a node endpoint follows it
// (a Session's batched channel, resumed from its last bookmark on
// whichever replica takes it), and what it received of the node's pods.
type shardView struct {
	node    string
	session *watchmux.Session
	ch      *watchmux.SessionChannel

	mu sync.Mutex
	// initial: the initial state's bookmark came; after it, every pod
	// event's resourceVersion, by pod name.
	initial bool
	seen    map[string][]uint64
	// errors are the ERRORs the channel ended with (a 410: the view
	// could not be resumed and would be opened whole).
	errors []*metav1.Status
	// firstAfter is when the first bookmark after step came.
	firstAfter time.Time
}

// shardViews are the scenario's views, one per node.
type shardViews struct {
	views   []*shardView
	step    atomic.Pointer[time.Time] // when the replica went
	mu      sync.Mutex
	resumes map[string]int // by outcome
	readers sync.WaitGroup
}

// open opens every node's view through the forwarder (the Service), as
// the node: the replica there redirects it to the owner.
func (s *shardReplicas) openViews(ctx context.Context, nodes int) (*shardViews, error) {
	vs := &shardViews{resumes: map[string]int{}}
	bar := s.env.phase(nodes, "shards: opening %d node views through the Service", nodes)
	defer bar.Done()
	sem := make(chan struct{}, 16)
	errs := make(chan error, nodes)
	vs.views = make([]*shardView, nodes)
	var wg sync.WaitGroup
	for i := range nodes {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			v, err := s.openView(ctx, vs, shardNode(i))
			if err != nil {
				errs <- err
				return
			}
			vs.views[i] = v
			bar.Add(1)
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		vs.close()
		return nil, err
	}
	return vs, nil
}

func (s *shardReplicas) openView(ctx context.Context, vs *shardViews, node string) (*shardView, error) {
	cfg, err := s.cp.NodeConfig(node)
	if err != nil {
		return nil, err
	}
	cfg.Host = "https://" + s.fwd.Addr()
	cfg.Dial = s.dial
	v := &shardView{node: node, seen: map[string][]uint64{}}
	v.session, err = watchmux.NewSession(ctx, cfg, watchmux.WithResumeObserver(vs.observe))
	if err != nil {
		return nil, fmt.Errorf("node %s: dial: %w", node, err)
	}
	v.ch, err = v.session.WatchBatches(ctx, v1alpha1.GetOperation{
		Resource: v1alpha1.NodeViewResourceV1alpha2,
		Options:  metav1.ListOptions{FieldSelector: "metadata.name=" + node, SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true},
	})
	if err != nil {
		_ = v.session.Close()
		return nil, fmt.Errorf("node %s: open its view: %w", node, err)
	}
	vs.readers.Add(1)
	go func() {
		defer vs.readers.Done()
		v.read(vs)
	}()
	return v, nil
}

func (vs *shardViews) observe(r watchmux.Resume) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	vs.resumes[r.Outcome]++
}

// viewObject is what the scenario reads of a view event's object.
type viewObject struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name            string `json:"name"`
		Namespace       string `json:"namespace"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
}

func (v *shardView) read(vs *shardViews) {
	for ev := range v.ch.Events {
		v.mu.Lock()
		switch ev.Type {
		case watch.Error:
			v.errors = append(v.errors, ev.Status)
		case watch.Bookmark:
			if v.initial && v.firstAfter.IsZero() {
				if at := vs.step.Load(); at != nil {
					v.firstAfter = time.Now()
				}
			}
			v.initial = true
		default:
			var o viewObject
			if v.initial && json.Unmarshal(ev.Object, &o) == nil && o.Kind == "Pod" && o.Metadata.Namespace == shardsNamespace {
				rv, _ := strconv.ParseUint(o.Metadata.ResourceVersion, 10, 64)
				v.seen[o.Metadata.Name] = append(v.seen[o.Metadata.Name], rv)
			}
		}
		v.mu.Unlock()
	}
}

func (vs *shardViews) close() {
	for _, v := range vs.views {
		if v != nil {
			_ = v.session.Close()
		}
	}
	vs.readers.Wait()
}

// shardsOutcome is what losing a replica did to the views.
type shardsOutcome struct {
	views, affected   int
	writes, failures  int
	lost, repeated    int
	reopened, errored int
	resumeTimes       []time.Duration
	resumes           map[string]int
}

func (o *shardsOutcome) figures() []Figure {
	p := "owner killed: "
	out := []Figure{
		{Name: p + "node views", Value: float64(o.views)},
		{Name: p + "views on the killed replica", Value: float64(o.affected)},
		{Name: p + "pod writes", Value: float64(o.writes)},
		{Name: p + "pod writes failed", Value: float64(o.failures)},
		{Name: p + "events lost", Value: float64(o.lost)},
		{Name: p + "events repeated", Value: float64(o.repeated)},
		{Name: p + "views reopened whole (410, or the initial state lost)", Value: float64(o.reopened)},
		{Name: p + "views ended otherwise", Value: float64(o.errored)},
	}
	for outcome, n := range o.resumes {
		out = append(out, Figure{Name: p + "channels resumed, " + outcome, Value: float64(n)})
	}
	if len(o.resumeTimes) > 0 {
		var worst time.Duration
		for _, d := range o.resumeTimes {
			worst = max(worst, d)
		}
		out = append(out, Figure{Name: p + "every view resumed after", Value: worst.Seconds(), Unit: "s"})
	}
	return out
}

// loseOne opens a view per node, writes pods, kills the replica that
// owns the most views, writes on, and then checks that every view got
// every write once.
func (s *shardReplicas) loseOne(ctx context.Context, c *shardsCluster, table *shard.Table) (*shardsOutcome, error) {
	load := c.load
	vs, err := s.openViews(ctx, load.Nodes)
	if err != nil {
		return nil, err
	}
	defer vs.close()
	victim := 1 % len(s.live)
	w := newPodWriter(c, load)
	wctx, stopWrites := context.WithCancel(ctx)
	writing := make(chan struct{})
	go func() { defer close(writing); w.run(wctx, load.WriteRate) }()
	sleepCtx(ctx, load.Settle)
	s.env.progressf("shards: killing %s, the owner of a third of the nodes", shardMember(victim))
	now := time.Now()
	vs.step.Store(&now)
	if err := s.kill(ctx, victim); err != nil {
		stopWrites()
		<-writing
		return nil, err
	}
	sleepCtx(ctx, 3*load.Settle)
	stopWrites()
	<-writing
	s.env.progressf("shards: writes stopped (%d); waiting for every view to have the last", w.total())
	deadline := time.Now().Add(failoverDeliveryTimeout)
	for time.Now().Before(deadline) && !vs.delivered(w) {
		sleepCtx(ctx, 500*time.Millisecond)
	}
	out := vs.compare(w, table, shardMember(victim), now)
	return out, nil
}

// delivered reports whether every view has the last write of each of
// its pods.
func (vs *shardViews) delivered(w *podWriter) bool {
	for i, v := range vs.views {
		v.mu.Lock()
		ok := true
		for pod, rvs := range w.writtenOn(i) {
			got := v.seen[pod]
			if len(got) == 0 || got[len(got)-1] < rvs[len(rvs)-1] {
				ok = false
				break
			}
		}
		v.mu.Unlock()
		if !ok {
			return false
		}
	}
	return true
}

func (vs *shardViews) compare(w *podWriter, table *shard.Table, victim string, at time.Time) *shardsOutcome {
	o := &shardsOutcome{views: len(vs.views), writes: w.total(), failures: int(w.failed.Load())}
	for i, v := range vs.views {
		v.mu.Lock()
		affected := table.OwnerOf(v.node) == victim
		if affected {
			o.affected++
			if !v.firstAfter.IsZero() {
				o.resumeTimes = append(o.resumeTimes, v.firstAfter.Sub(at))
			}
		}
		for _, st := range v.errors {
			if st != nil && (st.Code == 410 || st.Reason == metav1.StatusReasonExpired || st.Reason == metav1.StatusReasonGone) {
				o.reopened++
			} else {
				o.errored++
			}
		}
		for pod, rvs := range w.writtenOn(i) {
			count := map[uint64]int{}
			for _, rv := range v.seen[pod] {
				count[rv]++
			}
			for _, rv := range rvs {
				switch n := count[rv]; {
				case n == 0:
					o.lost++
				case n > 1:
					o.repeated += n - 1
				}
			}
		}
		v.mu.Unlock()
	}
	vs.mu.Lock()
	o.resumes = map[string]int{}
	for k, n := range vs.resumes {
		o.resumes[k] = n
	}
	o.reopened += vs.resumes[watchmux.ResumeExpired] + vs.resumes[watchmux.ResumeLostInitial]
	vs.mu.Unlock()
	return o
}

// podWriter updates the scenario's pods round robin (an annotation, as a
// controller's write) and keeps the resourceVersions it wrote.
type podWriter struct {
	c      *shardsCluster
	load   ShardsLoad
	mu     sync.Mutex
	byNode []map[string][]uint64
	n      int
	failed atomic.Int64
}

func newPodWriter(c *shardsCluster, load ShardsLoad) *podWriter {
	w := &podWriter{c: c, load: load, byNode: make([]map[string][]uint64, load.Nodes)}
	for i := range w.byNode {
		w.byNode[i] = map[string][]uint64{}
	}
	return w
}

func (w *podWriter) run(ctx context.Context, rate int) {
	tick := time.NewTicker(time.Second / time.Duration(max(rate, 1)))
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for k := 0; ; k++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// Node-major over the writes, so that each node's pods change
		// a few times in a run of a few hundred writes.
		node := k % w.load.Nodes
		j := (k / w.load.Nodes) % w.load.PodsPerNode
		wg.Go(func() { w.write(ctx, node, j, k) })
	}
}

func (w *podWriter) write(ctx context.Context, node, j, k int) {
	name := shardPod(node, j)
	patch := []byte(`{"metadata":{"annotations":{"bench.nodeproxy.io/write":"` + strconv.Itoa(k) + `"}}}`)
	p, err := w.c.kube.CoreV1().Pods(shardsNamespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		if ctx.Err() == nil {
			w.failed.Add(1)
			klog.V(2).InfoS("Shards pod write failed", "pod", name, "err", err)
		}
		return
	}
	rv, _ := strconv.ParseUint(p.ResourceVersion, 10, 64)
	w.mu.Lock()
	w.byNode[node][name] = append(w.byNode[node][name], rv)
	w.n++
	w.mu.Unlock()
}

func (w *podWriter) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// writtenOn are the versions written of node i's pods, each pod's in
// order.
func (w *podWriter) writtenOn(i int) map[string][]uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string][]uint64, len(w.byNode[i]))
	for pod, rvs := range w.byNode[i] {
		out[pod] = slices.Sorted(slices.Values(rvs))
	}
	return out
}
