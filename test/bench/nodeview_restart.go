package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// viewRestart is what restarting kubelets behind copy endpoints, with
// the control plane up, asked of anything off their nodes.
type viewRestart struct {
	kubelets int
	// took is, for each kubelet, from its stop to its pods Running in its
	// own /pods with every file written.
	took []time.Duration
	// window is from the first stop to the last scrape.
	window time.Duration
	// reads are the restarted kubelets' reads (get, list, watch) by the
	// path that answered them: copy, memory (the endpoint's memory of
	// the node's Lease), hub, apiserver; offNode those of
	// the hub and apiserver paths by verb and resource.
	reads   map[string]float64
	offNode requestCounts
	// progress are the progress requests the endpoints sent on their
	// views' channels (websocket messages, not HTTP requests);
	// consistent their consistent reads by result.
	progress   float64
	consistent map[string]float64
	// hubOpened are channels the hub opened in the window (every node's,
	// the restarted ones' among them), hubGets its bulk gets.
	hubOpened, hubGets float64
	// apiserverReads are kube-apiserver's GET, LIST and WATCH in the
	// window, by verb and resource: every client's, the other nodes' and
	// the hub's included.
	apiserverReads requestCounts
}

// restartKubelets restarts the kubelets of nodes which together and
// counts the requests until each has its pods Running with their files
// again.
func (s *viewSide) restartKubelets(ctx context.Context, which []int) (r viewRestart, err error) {
	r.kubelets = len(which)
	s.env.progressf("nodeview (%s): restarting %d kubelet(s), counting the requests that leave their nodes", s.way, len(which))
	before, err := s.sampleAll(ctx)
	if err != nil {
		return r, err
	}
	began := time.Now()
	r.took = make([]time.Duration, len(which))
	g, gctx := errgroup.WithContext(ctx)
	for j, i := range which {
		g.Go(func() error {
			start := time.Now()
			if err := s.restartKubelet(gctx, i); err != nil {
				return err
			}
			if err := s.waitNodeFiles(gctx, i, "v"); err != nil {
				return err
			}
			r.took[j] = time.Since(start)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return r, err
	}
	// The kubelet's last reflectors start after its pods run; a few
	// seconds more to count them.
	if err := sleepUntil(ctx, time.Now().Add(5*time.Second)); err != nil {
		return r, err
	}
	after, err := s.sampleAll(ctx)
	if err != nil {
		return r, err
	}
	endpointsBefore, endpointsAfter := before.endpoints, after.endpoints
	hubBefore, hubAfter := before.hub, after.hub
	r.window = time.Since(began)
	r.reads = readsByPath(endpointsBefore, endpointsAfter, which)
	r.offNode = readsByResource(endpointsBefore, endpointsAfter, which, "apiserver")
	for k, v := range readsByResource(endpointsBefore, endpointsAfter, which, "hub") {
		r.offNode["hub: "+k] += v
	}
	delta := func(name string, match ...string) float64 {
		return sumEndpoints(endpointsAfter, which, name, match...) - sumEndpoints(endpointsBefore, which, name, match...)
	}
	r.progress = delta("nodeproxy_node_view_progress_requests_total")
	r.consistent = map[string]float64{}
	for _, res := range []string{"ok", "timeout"} {
		r.consistent[res] = delta("nodeproxy_node_copy_consistent_reads_total", "result", res)
	}
	r.hubOpened = hubAfter.Sum("nodeproxy_watchmux_requests_total", "result", "opened") - hubBefore.Sum("nodeproxy_watchmux_requests_total", "result", "opened")
	r.hubGets = hubAfter.Sum("nodeproxy_bulk_get_requests_total") - hubBefore.Sum("nodeproxy_bulk_get_requests_total")
	r.apiserverReads = readsOf(requestsServed(before.apiserver, after.apiserver))
	s.env.progressf("nodeview (%s): restarted kubelets' reads: %.0f from the copy, %.0f from the endpoint's memory of the Lease, %.0f to the hub, %.0f to kube-apiserver; %.0f progress requests",
		s.way, r.reads["copy"], r.reads["memory"], r.reads["hub"], r.reads["apiserver"], r.progress)
	return r, nil
}

// viewSample is one scrape of every endpoint, the hub and kube-apiserver.
type viewSample struct {
	endpoints      []Metrics
	hub, apiserver Metrics
}

func (s *viewSide) sampleAll(ctx context.Context) (m viewSample, err error) {
	if m.endpoints, err = s.scrapeEndpoints(ctx); err != nil {
		return m, err
	}
	if m.hub, err = s.t.Nodeproxy.Metrics(ctx); err != nil {
		return m, err
	}
	m.apiserver, err = ScrapeAPIServer(ctx, s.admin.CoreV1().RESTClient())
	return m, err
}

// readsOf keeps the GET, LIST and WATCH of c.
func readsOf(c requestCounts) requestCounts {
	out := requestCounts{}
	for k, v := range c {
		if strings.HasPrefix(k, "GET ") || strings.HasPrefix(k, "LIST ") || strings.HasPrefix(k, "WATCH ") {
			out[k] = v
		}
	}
	return out
}

func (o *nodeViewOutcome) restartFigures() []Figure {
	r := o.restart
	p := "kubelet restart: "
	out := []Figure{
		{p + "kubelets restarted behind copy endpoints", float64(r.kubelets), ""},
		{p + "time to pods Running with their files, longest", maxDuration(r.took).Seconds(), "s"},
		{p + "window counted (first stop to last scrape)", r.window.Seconds(), "s"},
		{p + "the kubelets' reads answered from the copy", r.reads["copy"], ""},
		{p + "the kubelets' reads answered from the endpoint's memory of the node's Lease", r.reads["memory"], ""},
		{p + "the kubelets' reads that left the node, to the hub", r.reads["hub"], ""},
		{p + "the kubelets' reads that left the node, to kube-apiserver", r.reads["apiserver"], ""},
		{p + "progress requests on the views' channels (websocket messages, not HTTP)", r.progress, ""},
	}
	for _, res := range []string{"ok", "timeout"} {
		out = append(out, Figure{p + "consistent reads of the copy: " + res, r.consistent[res], ""})
	}
	for _, k := range r.offNode.sortedKeys() {
		if r.offNode[k] >= 1 {
			out = append(out, Figure{p + "a read that left the node: " + k, r.offNode[k], ""})
		}
	}
	out = append(out,
		Figure{p + "hub channels opened in the window (every node's)", r.hubOpened, ""},
		Figure{p + "hub bulk gets in the window", r.hubGets, ""},
		Figure{p + "kube-apiserver GET, LIST and WATCH in the window (every client's)", r.apiserverReads.total(), ""})
	for _, k := range r.apiserverReads.sortedKeys() {
		if r.apiserverReads[k] >= 1 {
			out = append(out, Figure{fmt.Sprintf("%skube-apiserver in the window: %s", p, k), r.apiserverReads[k], ""})
		}
	}
	return out
}
