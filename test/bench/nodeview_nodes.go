package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// viewSide is one way of running the nodeview scenario's nodes: each a
// hollow kubelet behind an endpoint, with or without the copy.
type viewSide struct {
	*sideRun
	// round labels the side's pods (roundLabel), so that each side has
	// pods of its own over the same objects.
	round    int
	kubemark string
	// load is the scenario's, for the services its nodes' pods bring.
	load NodeViewLoad
	// uids are the pods' UIDs, [node][pod].
	uids [][]types.UID
	// asNode reaches each node's endpoint with its kubelet's credentials;
	// scrape reads its /metrics with them.
	asNode []kubernetes.Interface
	scrape []*http.Client
	// idleChannels are the hub's open channels before either side's
	// nodes started.
	idleChannels float64
}

// viewFootprint is what one side's nodes cost the hub and themselves.
type viewFootprint struct {
	// channels and heap are the hub's open channels and live heap added
	// by the nodes, per node.
	channels, heap float64
	// views are the hub's open node views.
	views float64
	// rss are the endpoints' resident memory; copyObjects the objects in
	// their copies (0 without one).
	rss         []int64
	copyObjects float64
	// watches are the kubelets' open watches per node, by the path that
	// serves them (copy, hub, apiserver); hubWatches those the hub's
	// channels serve, by resource, over every node.
	watches    map[string]float64
	hubWatches requestCounts
	// upTook is from creating the pods to the last one Running.
	upTook time.Duration
	// changes are the changes the hub's cache took in while the nodes
	// started, per node, by resource.
	changes requestCounts
}

// start starts the side's nodes, binds their pods and waits for them to
// be Running, and measures what the nodes added to the hub.
func (s *viewSide) start(ctx context.Context, dir string, endpointArgs []string) (f viewFootprint, err error) {
	l := s.env.Kubelets
	if err := waitHubChannels(ctx, s.t, s.idleChannels); err != nil {
		return f, err
	}
	if s.load.FillLog > 0 {
		if err := s.fillChangeLogs(ctx, s.load.FillLog); err != nil {
			return f, err
		}
	}
	channels0, heap0, _, err := hubFootprint(ctx, s.t, s.profile("before"))
	if err != nil {
		return f, err
	}
	changes0, err := s.hubChanges(ctx)
	if err != nil {
		return f, err
	}
	bar := s.env.phase(l.Nodes, "nodeview (%s): starting %d hollow kubelets behind endpoints", s.way, l.Nodes)
	err = startHollowNodes(ctx, s.t, s.admin, s.kubemark, dir, s.ns+"-"+s.way, s.nodes, HollowNodeSpec{Fronted: true, EndpointArgs: endpointArgs}, bar)
	bar.Done()
	if err != nil {
		return f, err
	}
	for _, n := range s.nodes {
		cfg, err := clientcmd.BuildConfigFromFlags("", n.Endpoint.KubeletKubeconfig)
		if err != nil {
			return f, fmt.Errorf("kubeconfig of %s: %w", n.Name, err)
		}
		cfg.QPS, cfg.Burst = -1, 0 // the bench's reads are not the kubelet's, and not limited as its are
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return f, err
		}
		scrape, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return f, err
		}
		s.asNode, s.scrape = append(s.asNode, client), append(s.scrape, scrape)
	}
	s.env.progressf("nodeview (%s): %d pods, each mounting %d secrets and configmaps", s.way, l.Nodes*l.PodsPerNode, l.ObjectsPerPod)
	began := time.Now()
	if _, err := s.createPods(ctx, s.round, true); err != nil {
		return f, err
	}
	if err := s.createNamespacePods(ctx, s.load); err != nil {
		return f, err
	}
	if err := s.waitPods(ctx, s.round, corev1.PodRunning); err != nil {
		return f, err
	}
	f.upTook = time.Since(began)
	if err := s.readUIDs(ctx); err != nil {
		return f, err
	}
	// Every node's files written: the kubelets have read every object.
	for i := range s.nodes {
		if err := s.waitNodeFiles(ctx, i, "v"); err != nil {
			return f, err
		}
	}
	// The kubelets' reflectors have opened by now; a few seconds more
	// for the last channels and for the copies to be saved.
	if err := sleepUntil(ctx, time.Now().Add(5*time.Second)); err != nil {
		return f, err
	}
	n := float64(len(s.nodes))
	changes1, err := s.hubChanges(ctx)
	if err != nil {
		return f, err
	}
	f.changes = changes1.minus(changes0)
	for k := range f.changes {
		f.changes[k] /= n
	}
	if s.load.FillLog > 0 {
		if err := s.fillChangeLogs(ctx, s.load.FillLog); err != nil {
			return f, err
		}
	}
	channels1, heap1, views, err := hubFootprint(ctx, s.t, s.profile("after"))
	if err != nil {
		return f, err
	}
	f.channels, f.heap, f.views = (channels1-channels0)/n, (heap1-heap0)/n, views
	usage, err := endpointUsage(s.nodes)
	if err != nil {
		return f, err
	}
	for _, u := range usage {
		f.rss = append(f.rss, u.RSS)
	}
	ms, err := s.scrapeEndpoints(ctx)
	if err != nil {
		return f, err
	}
	f.copyObjects = sumEndpoints(ms, nil, "nodeproxy_node_copy_objects") / n
	f.watches, f.hubWatches = openWatches(ms)
	s.env.progressf("nodeview (%s): hub channels per node %.1f, hub heap per node %.2f MiB, endpoint RSS mean %.1f MiB",
		s.way, f.channels, f.heap/(1<<20), meanMiB(f.rss))
	return f, nil
}

// stop ends the side's nodes and deletes their pods at once (their
// kubelets are gone and would never confirm a graceful deletion).
func (s *viewSide) stop(ctx context.Context) error {
	for _, n := range s.nodes {
		if n != nil {
			n.Stop()
		}
	}
	if err := s.admin.CoreV1().Pods(s.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, roundPods(s.round)); err != nil {
		return fmt.Errorf("delete the pods of %s: %w", s.way, err)
	}
	if err := s.waitPods(ctx, s.round, ""); err != nil {
		return err
	}
	return cleanUp(ctx, s.admin, s.ns+"-"+s.way)
}

// readUIDs reads the UID of every pod of the side, as createPods named
// them.
func (s *viewSide) readUIDs(ctx context.Context) error {
	l := s.env.Kubelets
	s.uids = make([][]types.UID, len(s.nodes))
	for i := range s.nodes {
		for p := range l.PodsPerNode {
			pod, err := s.admin.CoreV1().Pods(s.ns).Get(ctx, fmt.Sprintf("r%d-%d-%d", s.round, i, p), metav1.GetOptions{})
			if err != nil {
				return err
			}
			s.uids[i] = append(s.uids[i], pod.UID)
		}
	}
	return nil
}

// nodeReady says what node i still lacks for its pods to run with their
// files, each secret's holding secretValue (configmaps keep "v"); nil
// when nothing. It asks the kubelet itself (its /pods), not
// kube-apiserver, which may be out of reach.
func (s *viewSide) nodeReady(ctx context.Context, i int, secretValue string) error {
	l := s.env.Kubelets
	n := s.nodes[i]
	for p, uid := range s.uids[i] {
		if err := n.Kubelet.Runs(ctx, uid); err != nil {
			return err
		}
		for o := range l.ObjectsPerPod {
			name := objectName(i, p, o)
			path, want := n.Kubelet.ConfigMapVolumeFile(uid, name, "value"), "v"
			if isSecret(l, o) {
				path, want = n.Kubelet.SecretVolumeFile(uid, name, "value"), secretValue
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if string(b) != want {
				return fmt.Errorf("%s holds %q, want %q", path, b, want)
			}
		}
	}
	return nil
}

// waitNodeFiles waits for nodeReady.
func (s *viewSide) waitNodeFiles(ctx context.Context, i int, secretValue string) error {
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		last = s.nodeReady(ctx, i, secretValue)
		return last == nil, nil
	}); err != nil {
		return fmt.Errorf("node %s: pods not Running with their files (%v): %w", s.nodes[i].Name, last, err)
	}
	return nil
}

// restartKubelet stops node i's kubelet and starts it again with a fresh
// root directory (its volumes written again), behind the same endpoint.
func (s *viewSide) restartKubelet(ctx context.Context, i int) error {
	n := s.nodes[i]
	n.Kubelet.Stop()
	h, err := controlplane.StartHollowKubelet(ctx, s.kubemark, controlplane.HollowKubeletOptions{
		Name: n.Name, Kubeconfig: n.Endpoint.KubeletKubeconfig, Dir: filepath.Dir(n.Kubelet.LogPath),
		NodeLabels: map[string]string{benchLabel: s.ns + "-" + s.way},
	})
	if err != nil {
		return err
	}
	n.Kubelet = h
	return nil
}

// scrapeEndpoints reads every node endpoint's /metrics, as its kubelet.
func (s *viewSide) scrapeEndpoints(ctx context.Context) ([]Metrics, error) {
	out := make([]Metrics, len(s.nodes))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for i, n := range s.nodes {
		g.Go(func() error {
			m, err := Scrape(gctx, s.scrape[i], n.Endpoint.URL+"/metrics")
			out[i] = m
			return err
		})
	}
	return out, g.Wait()
}

// sumEndpoints sums a family over the endpoints of which (all for nil).
func sumEndpoints(ms []Metrics, which []int, name string, match ...string) float64 {
	var sum float64
	if which == nil {
		for _, m := range ms {
			sum += m.Sum(name, match...)
		}
		return sum
	}
	for _, i := range which {
		sum += ms[i].Sum(name, match...)
	}
	return sum
}

// readsByPath are the kubelet's reads (get, list, watch) the endpoints
// of which answered, by path (copy; memory, the endpoint's memory of the
// node's Lease; hub; apiserver), between two scrapes of every endpoint.
func readsByPath(before, after []Metrics, which []int) map[string]float64 {
	out := map[string]float64{}
	for _, path := range []string{"copy", "memory", "hub", "apiserver"} {
		for _, verb := range []string{"get", "list", "watch"} {
			out[path] += sumEndpoints(after, which, "nodeproxy_node_requests_total", "path", path, "verb", verb) -
				sumEndpoints(before, which, "nodeproxy_node_requests_total", "path", path, "verb", verb)
		}
	}
	return out
}

// readsByResource are readsByPath's requests of one path, by "verb
// resource".
func readsByResource(before, after []Metrics, which []int, path string) requestCounts {
	count := func(ms []Metrics) requestCounts {
		out := requestCounts{}
		for j, m := range ms {
			if which != nil && !slices.Contains(which, j) {
				continue
			}
			for k, v := range countsBy(m, "nodeproxy_node_requests_total", func(l map[string]string) string {
				if l["path"] != path || (l["verb"] != "get" && l["verb"] != "list" && l["verb"] != "watch") {
					return ""
				}
				return l["verb"] + " " + l["resource"]
			}) {
				out[k] += v
			}
		}
		return out
	}
	return count(after).minus(count(before))
}

// profile is where the hub's heap profile of the side goes, when; ""
// for none.
func (s *viewSide) profile(when string) string {
	if s.env.NodeView.Profiles == "" {
		return ""
	}
	return filepath.Join(s.env.NodeView.Profiles, "hub-heap-"+s.way+"-"+when+".pprof")
}

// hubHeapSamples are the forced collections hubFootprint takes the
// median of, hubHeapGap apart: one reading also holds whatever the hub
// had in flight at that moment (an event being routed, a batch being
// written), which a median of three leaves out.
const (
	hubHeapSamples = 3
	hubHeapGap     = time.Second
)

// hubFootprint reads the hub's open channels, its live heap after a
// forced collection (the median of hubHeapSamples) and its open node
// views; the last sample's heap profile goes to profile unless that is
// "".
//
// The live heap is go_gc_heap_live_bytes, what the forced collection
// found live (runtime/metrics /gc/heap/live:bytes), not
// go_memstats_heap_alloc_bytes, which the scrape reads later and which
// holds, besides, what the hub allocated since the collection, the
// scrape's own allocations among it: megabytes, which moved the figure
// per node by a tenth of a MiB from one run to the next.
func hubFootprint(ctx context.Context, t Target, profile string) (channels, heap, views float64, err error) {
	heaps := make([]float64, 0, hubHeapSamples)
	for i := range hubHeapSamples {
		if i > 0 {
			if err := sleepUntil(ctx, time.Now().Add(hubHeapGap)); err != nil {
				return 0, 0, 0, err
			}
		}
		keep := ""
		if i == hubHeapSamples-1 {
			keep = profile
		}
		if err := hubHeapProfile(ctx, t, keep); err != nil {
			return 0, 0, 0, err
		}
		m, err := t.Nodeproxy.Metrics(ctx)
		if err != nil {
			return 0, 0, 0, err
		}
		if _, ok := m["go_gc_heap_live_bytes"]; !ok {
			return 0, 0, 0, errors.New("the hub's /metrics has no go_gc_heap_live_bytes")
		}
		heaps = append(heaps, m.Sum("go_gc_heap_live_bytes"))
		channels, views = m.Sum("nodeproxy_watchmux_channels"), m.Sum("nodeproxy_nodeview_views")
	}
	slices.Sort(heaps)
	return channels, heaps[len(heaps)/2], views, nil
}

// hubHeapProfile forces a garbage collection in the hub (its
// /debug/pprof/heap?gc=1, as afterGC does for kube-apiserver) and writes
// the heap profile it answers to profile, unless that is "".
func hubHeapProfile(ctx context.Context, t Target, profile string) error {
	hub := t.Local.Hub
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, hub.URL+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := hub.Admin.Do(req)
	if err != nil {
		return fmt.Errorf("force a garbage collection in the hub: %w", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("force a garbage collection in the hub: %s %v", resp.Status, err)
	}
	if profile == "" {
		return nil
	}
	return os.WriteFile(profile, body, 0o644)
}

// waitHubChannels waits, at most a minute, for the hub's open channels
// to fall to want: the channels of a side just stopped close as the hub
// notices their connections gone, and a side's first measure taken
// before then would count their memory as freed by its own nodes.
func waitHubChannels(ctx context.Context, t Target, want float64) error {
	var last float64
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		m, err := t.Nodeproxy.Metrics(ctx)
		if err != nil {
			return false, nil
		}
		last = m.Sum("nodeproxy_watchmux_channels")
		return last <= want, nil
	})
	if err != nil {
		return fmt.Errorf("the hub's channels at %.0f, not back to %.0f: %w", last, want, err)
	}
	return nil
}

func meanMiB(bs []int64) float64 {
	var sum int64
	for _, b := range bs {
		sum += b
	}
	return float64(sum) / float64(max(len(bs), 1)) / (1 << 20)
}

func maxMiB(bs []int64) float64 {
	var m int64
	for _, b := range bs {
		m = max(m, b)
	}
	return float64(m) / (1 << 20)
}

// openWatches are the kubelets' open watches per endpoint, by the path
// that serves them (copy, hub, apiserver), and those of the hub and
// apiserver paths by "path resource", over every endpoint.
func openWatches(ms []Metrics) (perNode map[string]float64, offNode requestCounts) {
	perNode, offNode = map[string]float64{}, requestCounts{}
	for _, m := range ms {
		for k, v := range countsBy(m, "nodeproxy_node_watches", func(l map[string]string) string { return l["path"] + " " + l["resource"] }) {
			path, _, _ := strings.Cut(k, " ")
			perNode[path] += v / float64(len(ms))
			if path != "copy" {
				offNode[k] += v
			}
		}
	}
	return perNode, offNode
}
