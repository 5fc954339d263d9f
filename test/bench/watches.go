package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// WatchShape is the workload of CompareWatches: every node runs one pod
// that uses SecretsPerNode secrets of its own and its namespace's shared
// secret (as every pod mounts its namespace's kube-root-ca.crt), and its
// kubelet watches each of them.
type WatchShape struct {
	Nodes          int
	SecretsPerNode int
	Namespaces     int
	// ObjectSize is the bytes of data in each secret.
	ObjectSize int
	// SharedUpdates is how often each namespace's shared secret is
	// updated in the update phase; each node's first own secret is
	// updated once besides.
	SharedUpdates int
	// Idle is how long the watches stay open with nothing changing.
	Idle time.Duration
}

// DefaultWatchShape is 500 nodes x 30 watches: 15,000 watches, what this
// project's 2-core development machine holds with both servers, etcd and
// the clients on it.
func DefaultWatchShape() WatchShape {
	return WatchShape{Nodes: 500, SecretsPerNode: 29, Namespaces: 10, ObjectSize: 1024, SharedUpdates: 10, Idle: 10 * time.Second}
}

// Validate refuses shapes that cannot be built, naming the field.
func (s WatchShape) Validate() error {
	var errs []error
	for _, f := range []struct {
		name  string
		value int
	}{{"nodes", s.Nodes}, {"secrets per node", s.SecretsPerNode}, {"namespaces", s.Namespaces}, {"object size", s.ObjectSize}} {
		if f.value <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", f.name, f.value))
		}
	}
	if s.Namespaces > s.Nodes {
		errs = append(errs, fmt.Errorf("namespaces (%d) must not outnumber nodes (%d): each namespace holds at least one node's pod", s.Namespaces, s.Nodes))
	}
	if s.SharedUpdates < 0 {
		errs = append(errs, fmt.Errorf("shared updates must not be negative, got %d", s.SharedUpdates))
	}
	if s.Idle < 0 {
		errs = append(errs, fmt.Errorf("idle must not be negative, got %s", s.Idle))
	}
	return errors.Join(errs...)
}

// Watches is the number of watches (or channels) of the whole workload.
func (s WatchShape) Watches() int { return s.Nodes * (s.SecretsPerNode + 1) }

// ServerFigures are one server's costs in one way of watching.
type ServerFigures struct {
	// OpenCPU is CPU time spent from the first watch request until every
	// watch had its initial state; IdleCPU over WatchShape.Idle after
	// that; UpdateCPU from the first update until every watcher had every
	// update.
	OpenCPU, IdleCPU, UpdateCPU time.Duration
	// RSSBefore is resident memory before the watches opened, RSSOpen
	// with them open (after the updates).
	RSSBefore, RSSOpen int64
	// Goroutines before and with the watches open.
	GoroutinesBefore, GoroutinesOpen int
}

// WayResult is one way of watching measured.
type WayResult struct {
	Way string
	// OpenTook is from the first request until every watch had its
	// initial state; UpdateTook from the first update until every
	// watcher had every update.
	OpenTook, UpdateTook time.Duration
	// Events is the MODIFIED events the watchers received in the update
	// phase: Nodes x (SharedUpdates+1) when nothing is lost.
	Events int64
	// APIServerWatches is kube-apiserver's open WATCH requests
	// (apiserver_longrunning_requests) with the watches open, and before
	// (its own informers', nodeproxy's cache's); Channels nodeproxy's open
	// channels.
	APIServerWatches, APIServerWatchesBefore, Channels int
	APIServer, Nodeproxy                               ServerFigures
}

// WatchComparison is the result of CompareWatches.
type WatchComparison struct {
	Shape WatchShape
	// Nodeproxy: one websocket per node to nodeproxy. StatusQuo: one
	// watch per object on kube-apiserver.
	Nodeproxy, StatusQuo WayResult
	// NodeproxyMeasured is false when nodeproxy's process was out of
	// reach (a remote cluster): its ServerFigures and Channels are zero.
	NodeproxyMeasured bool
}

// CompareWatches builds shape's workload through kube-apiserver (simulated
// nodes, namespaces, secrets, a pod per node), then opens the same
// watches twice: first as one bulk watch connection per node to
// nodeproxy, then as one watch per object on kube-apiserver. Each way
// goes through the same phases (open, idle, update, close) while both
// servers' CPU time, memory and goroutines are sampled (see Target).
// nodeproxy's way runs first: a Go process's resident memory hardly
// shrinks after a peak, and kube-apiserver's peak comes with the status
// quo. What it created is deleted at the end, however it ends.
//
// Progress lines go to log.
func CompareWatches(ctx context.Context, t Target, shape WatchShape, log io.Writer) (*WatchComparison, error) {
	if err := shape.Validate(); err != nil {
		return nil, err
	}
	c, err := newComparison(t, shape, log)
	if err != nil {
		return nil, err
	}
	return c.compare(ctx)
}

// compare is CompareWatches on a prepared comparison.
func (c *comparison) compare(ctx context.Context) (result *WatchComparison, err error) {
	defer func() {
		if cerr := cleanUp(ctx, c.admin, c.prefix); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if err := c.setUp(ctx); err != nil {
		return nil, err
	}
	result = &WatchComparison{Shape: c.shape, NodeproxyMeasured: c.Nodeproxy.Measured()}
	if result.Nodeproxy, err = c.measure(ctx, "nodeproxy: one bulk watch per node", c.openNodeproxy); err != nil {
		return nil, err
	}
	if result.StatusQuo, err = c.measure(ctx, "kube-apiserver: one watch per object", c.openAPIServer); err != nil {
		return nil, err
	}
	return result, nil
}

type comparison struct {
	Target
	shape WatchShape
	log   io.Writer

	admin  kubernetes.Interface
	prefix string // of this run's namespaces and nodes; its label value
	// phase announces a phase of total steps; by default a line in log.
	phase func(total int, format string, args ...any) Counter
	round int // update phase counter, so every update changes data
}

// scenarioComparison is newComparison for a scenario: progress lines and
// phases (bars on a terminal) go to env's, named by the scenario.
func scenarioComparison(env *Env, scenario string, t Target, shape WatchShape) (*comparison, error) {
	if err := shape.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", scenario, err)
	}
	c, err := newComparison(t, shape, progressWriter{env, scenario})
	if err != nil {
		return nil, err
	}
	c.phase = func(total int, format string, args ...any) Counter {
		return env.phase(total, scenario+": "+format, args...)
	}
	return c, nil
}

// newComparison prepares a run on t; setUp creates its workload, and
// cleanUp(ctx, c.admin, c.prefix) removes it.
func newComparison(t Target, shape WatchShape, log io.Writer) (*comparison, error) {
	admin, err := kubernetes.NewForConfig(t.Admin)
	if err != nil {
		return nil, err
	}
	// Unique per run: runs share a control plane in tests and in a
	// developer's cluster.
	c := &comparison{Target: t, shape: shape, log: log, admin: admin, prefix: "bench-" + utilrand.String(6)}
	c.phase = func(_ int, format string, args ...any) Counter {
		c.logf(format, args...)
		return noCounter{}
	}
	return c, nil
}

// follow shows count's way to want as a phase (a progress bar on a
// terminal) until the returned function, which may be called more than
// once, is called.
func (c *comparison) follow(count *atomic.Int64, want int, format string, args ...any) (stop func()) {
	bar := c.phase(want, format, args...)
	base := count.Load()
	shown := int64(0)
	show := func() {
		n := min(count.Load()-base, int64(want))
		bar.Add(int(n - shown))
		shown = n
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				show()
				bar.Done()
				return
			case <-tick.C:
				show()
			}
		}
	}()
	return sync.OnceFunc(func() { close(done); <-stopped })
}

func (c *comparison) logf(format string, args ...any) {
	fmt.Fprintf(c.log, format+"\n", args...)
}

// nsName is the run's ns-th namespace.
func (c *comparison) nsName(ns int) string { return fmt.Sprintf("%s-%d", c.prefix, ns) }

// namespace is where node's pod and secrets are.
func (c *comparison) namespace(node int) string { return c.nsName(node % c.shape.Namespaces) }

// nodeName is a simulated node's name: prefixed, so that it cannot be a
// real node's.
func (c *comparison) nodeName(node int) string { return fmt.Sprintf("%s-node-%d", c.prefix, node) }

func (c *comparison) secretName(node, j int) string { return fmt.Sprintf("node-%d-secret-%d", node, j) }

const sharedSecret = "shared"

// setUp creates the nodes, namespaces, secrets and pods, and waits until
// nodeproxy serves them.
func (c *comparison) setUp(ctx context.Context) error {
	started := time.Now()
	var creates []func(context.Context) error
	for ns := range c.shape.Namespaces {
		creates = append(creates, func(ctx context.Context) error {
			return controlplane.EnsureNamespace(ctx, c.admin, c.nsName(ns), map[string]string{benchLabel: c.prefix})
		})
	}
	for node := range c.shape.Nodes {
		creates = append(creates, func(ctx context.Context) error { return createNode(ctx, c.admin, c.nodeName(node), c.prefix) })
	}
	if err := parallel(ctx, 16, creates); err != nil {
		return err
	}
	data := map[string][]byte{"data": []byte(strings.Repeat("x", c.shape.ObjectSize))}
	creates = creates[:0]
	for ns := range c.shape.Namespaces {
		creates = append(creates, c.createSecret(c.nsName(ns), sharedSecret, data))
	}
	for node := range c.shape.Nodes {
		for j := range c.shape.SecretsPerNode {
			creates = append(creates, c.createSecret(c.namespace(node), c.secretName(node, j), data))
		}
		creates = append(creates, c.createPod(node))
	}
	var created atomic.Int64
	for i, create := range creates {
		creates[i] = func(ctx context.Context) error {
			defer created.Add(1)
			return create(ctx)
		}
	}
	stop := c.follow(&created, len(creates), "creating %d secrets and %d pods", len(creates)-c.shape.Nodes, c.shape.Nodes)
	err := parallel(ctx, 16, creates)
	stop()
	if err != nil {
		return err
	}
	c.logf("created %d nodes, %d secrets and %d pods in %d namespaces in %s", c.shape.Nodes, c.shape.Namespaces+c.shape.Nodes*c.shape.SecretsPerNode,
		c.shape.Nodes, c.shape.Namespaces, time.Since(started).Round(time.Second))

	// nodeproxy refuses a node's channel until its graph has the pod: wait
	// until every node's bulk get of its secrets returns them all.
	var checks []func(context.Context) error
	for node := range c.shape.Nodes {
		checks = append(checks, func(ctx context.Context) error {
			cfg, err := c.Bulk(c.nodeName(node))
			if err != nil {
				return err
			}
			client, err := newBulkClient(cfg)
			if err != nil {
				return err
			}
			var ops []v1alpha1.GetOperation
			for _, ref := range c.watched(node) {
				ops = append(ops, namedOp("secrets", ref[0], ref[1]))
			}
			var counts []int
			var lastErr error
			err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
				counts, lastErr = client.get(ctx, ops)
				return lastErr == nil && !slices.Contains(counts, 0), nil
			})
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("nodeproxy did not serve %s its secrets within 2 minutes of their creation (last answer %v, %v)", c.nodeName(node), counts, lastErr)
			}
			return err
		})
	}
	return parallel(ctx, 16, checks)
}

func (c *comparison) createSecret(ns, name string, data map[string][]byte) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}, metav1.CreateOptions{})
		return err
	}
}

func (c *comparison) createPod(node int) func(context.Context) error {
	volumes := []corev1.Volume{secretVolume("shared", sharedSecret)}
	for j := range c.shape.SecretsPerNode {
		volumes = append(volumes, secretVolume(fmt.Sprintf("s%d", j), c.secretName(node, j)))
	}
	pod := simulatedPod(c.namespace(node), fmt.Sprintf("pod-%d", node), c.nodeName(node), volumes)
	return func(ctx context.Context) error {
		_, err := c.admin.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		return err
	}
}

func secretVolume(name, secret string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}}
}

// parallel runs fs, at most workers at a time, and returns the first
// error; the context the functions get ends when parallel returns.
func parallel(ctx context.Context, workers int, fs []func(context.Context) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for _, f := range fs {
		g.Go(func() error { return f(ctx) })
	}
	return g.Wait()
}

// tally is what the watchers of one way report.
type tally struct {
	synced   atomic.Int64 // watches that have had their initial state
	modified atomic.Int64
	errMu    sync.Mutex
	err      error
}

func (t *tally) fail(err error) {
	t.errMu.Lock()
	defer t.errMu.Unlock()
	if t.err == nil {
		t.err = err
	}
}

func (t *tally) failed() error {
	t.errMu.Lock()
	defer t.errMu.Unlock()
	return t.err
}

// waitFor polls until count reaches want, a watcher fails, or a minute
// passes without progress.
func (t *tally) waitFor(ctx context.Context, what string, count *atomic.Int64, want int64) error {
	last, lastMoved := count.Load(), time.Now()
	for {
		n := count.Load()
		if n >= want {
			return nil
		}
		if err := t.failed(); err != nil {
			return err
		}
		if n != last {
			last, lastMoved = n, time.Now()
		} else if time.Since(lastMoved) > time.Minute {
			return fmt.Errorf("%s: stuck at %d of %d for a minute", what, n, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// sample is both servers' usage and goroutines at one moment.
type sample struct {
	apiserver, nodeproxy         Usage
	apiGoroutines, npGoroutines  int
	apiserverWatches, npChannels int
}

func (c *comparison) sample(ctx context.Context) (sample, error) {
	var s sample
	api, m, err := c.APIServer.sample(ctx)
	if err != nil {
		return s, fmt.Errorf("kube-apiserver: %w", err)
	}
	s.apiserver, s.apiGoroutines = api, int(m.Sum("go_goroutines"))
	s.apiserverWatches = int(m.Sum("apiserver_longrunning_requests", "verb", "WATCH"))
	if !c.Nodeproxy.Measured() {
		return s, nil
	}
	np, m, err := c.Nodeproxy.sample(ctx)
	if err != nil {
		return s, fmt.Errorf("nodeproxy: %w", err)
	}
	s.nodeproxy, s.npGoroutines = np, int(m.Sum("go_goroutines"))
	s.npChannels = int(m.Sum("nodeproxy_watchmux_channels"))
	return s, nil
}

// opener opens every node's watches, reporting to t, and returns what
// closes them all.
type opener func(ctx context.Context, t *tally) (closeAll func(), err error)

func (c *comparison) measure(ctx context.Context, way string, open opener) (WayResult, error) {
	r := WayResult{Way: way}
	watchesBefore, err := lastingWatches(ctx, func(ctx context.Context) (float64, error) {
		s, err := c.sample(ctx)
		return float64(s.apiserverWatches), err
	})
	if err != nil {
		return r, err
	}
	before, err := c.sample(ctx)
	if err != nil {
		return r, err
	}
	t := &tally{}
	started := time.Now()
	stop := c.follow(&t.synced, c.shape.Watches(), "%s: opening %d watches for %d nodes", way, c.shape.Watches(), c.shape.Nodes)
	defer func() { stop() }() // the one running when measure returns
	closeAll, err := open(ctx, t)
	if closeAll != nil {
		defer closeAll()
	}
	if err != nil {
		return r, fmt.Errorf("%s: %w", way, err)
	}
	if err := t.waitFor(ctx, way+": initial state", &t.synced, int64(c.shape.Watches())); err != nil {
		return r, err
	}
	r.OpenTook = time.Since(started)
	stop()
	opened, err := c.sample(ctx)
	if err != nil {
		return r, err
	}
	c.logf("%s: open in %s; idling %s", way, r.OpenTook.Round(time.Millisecond), c.shape.Idle)
	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-time.After(c.shape.Idle):
	}
	idled, err := c.sample(ctx)
	if err != nil {
		return r, err
	}
	if err := t.failed(); err != nil {
		return r, err
	}

	want := int64(c.shape.Nodes * (c.shape.SharedUpdates + 1))
	stop = c.follow(&t.modified, int(want), "%s: %d updates, %d events to deliver", way, c.shape.Namespaces*c.shape.SharedUpdates+c.shape.Nodes, want)
	started = time.Now()
	if err := c.update(ctx); err != nil {
		return r, err
	}
	if err := t.waitFor(ctx, way+": updates", &t.modified, want); err != nil {
		return r, err
	}
	r.UpdateTook = time.Since(started)
	stop()
	updated, err := c.sample(ctx)
	if err != nil {
		return r, err
	}
	r.Events = t.modified.Load()
	// The hub's probes for consistent reads are WATCHes too, for a
	// second or two: count what lasts.
	lasting, err := lastingWatches(ctx, func(ctx context.Context) (float64, error) {
		s, err := c.sample(ctx)
		return float64(s.apiserverWatches), err
	})
	if err != nil {
		return r, err
	}
	r.APIServerWatches, r.APIServerWatchesBefore, r.Channels = int(lasting), int(watchesBefore), updated.npChannels
	r.APIServer = ServerFigures{
		OpenCPU: opened.apiserver.CPU - before.apiserver.CPU, IdleCPU: idled.apiserver.CPU - opened.apiserver.CPU,
		UpdateCPU: updated.apiserver.CPU - idled.apiserver.CPU, RSSBefore: before.apiserver.RSS, RSSOpen: updated.apiserver.RSS,
		GoroutinesBefore: before.apiGoroutines, GoroutinesOpen: updated.apiGoroutines,
	}
	r.Nodeproxy = ServerFigures{
		OpenCPU: opened.nodeproxy.CPU - before.nodeproxy.CPU, IdleCPU: idled.nodeproxy.CPU - opened.nodeproxy.CPU,
		UpdateCPU: updated.nodeproxy.CPU - idled.nodeproxy.CPU, RSSBefore: before.nodeproxy.RSS, RSSOpen: updated.nodeproxy.RSS,
		GoroutinesBefore: before.npGoroutines, GoroutinesOpen: updated.npGoroutines,
	}
	c.logf("%s: updates delivered in %s", way, r.UpdateTook.Round(time.Millisecond))
	return r, nil
}

// update changes every namespace's shared secret SharedUpdates times and
// each node's first own secret once.
func (c *comparison) update(ctx context.Context) error {
	c.round++
	var updates []func(context.Context) error
	for ns := range c.shape.Namespaces {
		// One writer per shared secret: concurrent updates of one
		// object would conflict.
		updates = append(updates, func(ctx context.Context) error {
			for k := range c.shape.SharedUpdates {
				if err := c.updateSecret(c.nsName(ns), sharedSecret, fmt.Sprintf("round %d update %d", c.round, k))(ctx); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for node := range c.shape.Nodes {
		updates = append(updates, c.updateSecret(c.namespace(node), c.secretName(node, 0), fmt.Sprintf("round %d", c.round)))
	}
	return parallel(ctx, 8, updates)
}

func (c *comparison) updateSecret(ns, name, value string) func(context.Context) error {
	return func(ctx context.Context) error {
		s, err := c.admin.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Data["update"] = []byte(value)
		_, err = c.admin.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{})
		return err
	}
}

// watched lists the secrets node's kubelet watches: namespace and name.
func (c *comparison) watched(node int) [][2]string {
	ns := c.namespace(node)
	out := [][2]string{{ns, sharedSecret}}
	for j := range c.shape.SecretsPerNode {
		out = append(out, [2]string{ns, c.secretName(node, j)})
	}
	return out
}

// openAPIServer opens, for every node, one watch per secret on
// kube-apiserver with the node's credentials, as a kubelet's
// watch-based secret manager does: a field selector on the name, the
// initial state streamed (sendInitialEvents), bookmarks allowed. Each
// node's watches share one HTTP/2 connection, as a kubelet's do.
func (c *comparison) openAPIServer(ctx context.Context, t *tally) (func(), error) {
	// The watches live on watchCtx, not on the context parallel hands
	// each opener, which ends when parallel returns.
	watchCtx, cancel := context.WithCancel(ctx)
	var watchers sync.WaitGroup
	closeAll := func() { cancel(); watchers.Wait() }
	var opens []func(context.Context) error
	for node := range c.shape.Nodes {
		opens = append(opens, func(context.Context) error {
			ctx := watchCtx
			cfg, err := c.Node(c.nodeName(node))
			if err != nil {
				return err
			}
			kube, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			for _, ref := range c.watched(node) {
				w, err := kube.CoreV1().Secrets(ref[0]).Watch(ctx, metav1.ListOptions{
					FieldSelector:        "metadata.name=" + ref[1],
					AllowWatchBookmarks:  true,
					SendInitialEvents:    ptr.To(true),
					ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
				})
				if err != nil {
					return fmt.Errorf("%s watching secret %s/%s: %w", c.nodeName(node), ref[0], ref[1], err)
				}
				watchers.Go(func() {
					defer w.Stop()
					for ev := range w.ResultChan() {
						switch ev.Type {
						case watch.Bookmark:
							if s, ok := ev.Object.(*corev1.Secret); ok && s.Annotations[metav1.InitialEventsAnnotationKey] == "true" {
								t.synced.Add(1)
							}
						case watch.Modified:
							t.modified.Add(1)
						case watch.Error:
							t.fail(fmt.Errorf("%s's watch of secret %s/%s: %v", c.nodeName(node), ref[0], ref[1], ev.Object))
							return
						}
					}
					if ctx.Err() == nil {
						t.fail(fmt.Errorf("%s's watch of secret %s/%s ended", c.nodeName(node), ref[0], ref[1]))
					}
				})
			}
			return nil
		})
	}
	return closeAll, parallel(ctx, 16, opens)
}

// openNodeproxy opens, for every node, one websocket to nodeproxy with the
// node's credentials and a channel per secret, with the same options.
func (c *comparison) openNodeproxy(ctx context.Context, t *tally) (func(), error) {
	return c.openBulkWatches(ctx, func(node, _ int, ev watchmux.Event) {
		ref := c.watched(node)
		switch ev.Type {
		case watch.Bookmark:
			if strings.Contains(string(ev.Object), metav1.InitialEventsAnnotationKey) {
				t.synced.Add(1)
			}
		case watch.Modified:
			t.modified.Add(1)
		case watch.Error:
			t.fail(fmt.Errorf("%s's channel on secret %s: %s", c.nodeName(node), ref, ev.Status.Message))
		}
	}, t.fail)
}

// openBulkWatches opens, for every node, one websocket to nodeproxy (Bulk)
// with a channel per secret it watches (sendInitialEvents, bookmarks),
// and calls on with each event read: node, the secret's index in
// watched(node), the event. A channel's reader stops after an ERROR; a
// channel that ends otherwise before closeAll is reported to fail.
func (c *comparison) openBulkWatches(ctx context.Context, on func(node, secret int, ev watchmux.Event), fail func(error)) (closeAll func(), err error) {
	var mu sync.Mutex
	var clients []*watchmux.Client
	var readers sync.WaitGroup
	closed := make(chan struct{})
	closeAll = func() {
		close(closed)
		mu.Lock()
		for _, cl := range clients {
			_ = cl.Close()
		}
		mu.Unlock()
		readers.Wait()
	}
	secrets := metav1GVR("secrets")
	var opens []func(context.Context) error
	for node := range c.shape.Nodes {
		opens = append(opens, func(context.Context) error {
			cfg, err := c.Bulk(c.nodeName(node))
			if err != nil {
				return err
			}
			cl, err := watchmux.Dial(ctx, cfg)
			if err != nil {
				return fmt.Errorf("%s: %w", c.nodeName(node), err)
			}
			mu.Lock()
			clients = append(clients, cl)
			mu.Unlock()
			for j, ref := range c.watched(node) {
				ch, err := cl.Watch(ctx, v1alpha1.GetOperation{Resource: secrets, Namespace: ref[0], Options: metav1.ListOptions{
					FieldSelector:       "metadata.name=" + ref[1],
					AllowWatchBookmarks: true,
					SendInitialEvents:   ptr.To(true),
				}})
				if err != nil {
					return fmt.Errorf("%s watching secret %s/%s: %w", c.nodeName(node), ref[0], ref[1], err)
				}
				readers.Go(func() {
					for ev := range ch.Events {
						on(node, j, ev)
						if ev.Type == watch.Error {
							return
						}
					}
					select {
					case <-closed:
					default:
						fail(fmt.Errorf("%s's channel on secret %s/%s ended", c.nodeName(node), ref[0], ref[1]))
					}
				})
			}
			return nil
		})
	}
	return closeAll, parallel(ctx, 16, opens)
}
