package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// viewOutage is what the nodes did while kube-apiserver and the hub were
// stopped, and when they came back.
type viewOutage struct {
	length time.Duration
	// offlineTook is from the stop to every endpoint offline
	// (nodeproxy_node_offline_since_seconds set).
	offlineTook time.Duration
	// upOffline are, for each kubelet restarted during the outage, from
	// its stop to its pods Running in its own /pods with every file
	// written; notUp those that were not by the outage's end, lastNotUp
	// what the last of them lacked.
	restarted int
	upOffline []time.Duration
	notUp     int
	lastNotUp string
	// offlineReads are the kubelets' reads the copies answered offline.
	offlineReads float64
	// apiReady and hubReady are from the return's start to each one's
	// /readyz; online, current are from both ready to every endpoint
	// following its hub again, and to every node's copy holding every
	// secret at kube-apiserver's version after the updates.
	apiReady, hubReady, online, current time.Duration
	// fileLatencies are from a secret's update to its new value in a
	// pod's file, every pod of every node.
	fileLatencies []time.Duration
	// checked objects were read consistently through their node's
	// endpoint at the end; stale of them had another version than
	// kube-apiserver's.
	checked, stale int
	// watched secrets were followed through one endpoint, as the kubelet
	// reads a secret, from before the outage to after the updates: lost
	// of them never showed the update, repeated events came twice,
	// extra events were not the update, ended watches ended with an
	// error; watchRestarts are watches that ended cleanly and were
	// opened again; relists are lists after a 410 (the copy started
	// over), and byRelist the updates seen in such a list, not as an
	// event.
	watched, lost, repeated, extra, ended int
	relists, byRelist                     int
	watchRestarts                         int64
	// opens are the hub's node view opens since it came back, by how
	// (initial, resumed, replaced, expired, refused); reopened the endpoints' views
	// opened afresh on 410 (nodeproxy_node_view_reopens_total).
	opens    map[string]float64
	reopened float64
	// apiserverReads are kube-apiserver's GET, LIST and WATCH since it
	// came back, until the end of the checks, by verb and resource: the
	// hub's informers and the nodes'.
	apiserverReads requestCounts
	// nodeReads are the kubelets' reads the endpoints sent off the node
	// over the outage and the return, by path (hub, apiserver), and
	// offNode those by verb and resource.
	nodeReads map[string]float64
	offNode   requestCounts
	// watches are the kubelets' open watches per node at the end, by
	// path, and offNodeWatches those off the copy by path and resource.
	watches        map[string]float64
	offNodeWatches requestCounts
	// hubChannels are the hub's open channels per node at the end.
	hubChannels float64
	// readyAt is when kube-apiserver and the hub were both ready again.
	readyAt time.Time
	// settled is from readyAt to the hub's channels one per node again
	// (0: not within the settle); settledChannels and settledWatches
	// the hub's channels and the kubelets' watches by path, per node,
	// at its end.
	settled         time.Duration
	settledChannels float64
	settledWatches  map[string]float64
}

// outageValue is what the secrets are set to after the outage.
const outageValue = "after-outage"

// outage stops kube-apiserver and the hub with the nodes running,
// restarts a third of the kubelets meanwhile, and brings both back.
func (s *viewSide) outage(ctx context.Context, l NodeViewLoad) (o viewOutage, err error) {
	o.length = l.Outage
	local := s.t.Local
	// Node 0's secrets, followed through its endpoint as its kubelet
	// reads them, from before the outage to after the updates.
	watchNode := 0
	var names []string
	for _, pod := range s.secrets[watchNode] {
		names = append(names, pod...)
	}
	logs := make([]*channelLog, len(names))
	fctx, stopFollowing := context.WithCancel(ctx)
	var followers sync.WaitGroup
	defer func() {
		stopFollowing()
		followers.Wait()
	}()
	var restarts atomic.Int64
	for k, name := range names {
		logs[k] = &channelLog{}
		followers.Go(func() { logs[k].follow(fctx, s.asNode[watchNode], s.ns, name, &restarts, true) })
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, lg := range logs {
			if !lg.hasInitial() && !lg.ended() {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return o, fmt.Errorf("follow %d secrets through %s: %w", len(names), s.nodes[watchNode].Name, err)
	}
	before, err := s.scrapeEndpoints(ctx)
	if err != nil {
		return o, err
	}

	s.env.progressf("nodeview (%s): stopping kube-apiserver and the hub for %s", s.way, l.Outage)
	cut := time.Now()
	local.ControlPlane.APIServer().Stop()
	local.Hub.Process.Stop()
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, l.Outage, true, func(ctx context.Context) (bool, error) {
		ms, err := s.scrapeEndpoints(ctx)
		if err != nil {
			return false, nil
		}
		for _, m := range ms {
			if m.Sum("nodeproxy_node_offline_since_seconds") == 0 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return o, fmt.Errorf("endpoints not all offline within %s: %w", l.Outage, err)
	}
	o.offlineTook = time.Since(cut)
	s.env.progressf("nodeview (%s): every endpoint offline after %.1fs; restarting %d kubelets", s.way, o.offlineTook.Seconds(), l.outageRestarts())

	o.restarted = l.outageRestarts()
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4) // each start is a burst of CPU; 2 cores
	for i := range o.restarted {
		g.Go(func() error {
			start := time.Now()
			if err := s.restartKubelet(gctx, i); err != nil {
				return err
			}
			var last error
			err := wait.PollUntilContextTimeout(gctx, 250*time.Millisecond, time.Until(cut.Add(l.Outage)), true, func(ctx context.Context) (bool, error) {
				last = s.nodeReady(ctx, i, "v")
				return last == nil, nil
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				o.notUp++
				o.lastNotUp = fmt.Sprintf("%s: %v", s.nodes[i].Name, last)
				return nil
			}
			o.upOffline = append(o.upOffline, time.Since(start))
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return o, err
	}
	s.env.progressf("nodeview (%s): %d of %d restarted kubelets ran their pods with their files offline (longest %.1fs)%s",
		s.way, len(o.upOffline), o.restarted, maxDuration(o.upOffline).Seconds(), notUpNote(o))
	offline, err := s.scrapeEndpoints(ctx)
	if err != nil {
		return o, err
	}
	o.offlineReads = sumEndpoints(offline, nil, "nodeproxy_node_copy_reads_total", "mode", "offline") -
		sumEndpoints(before, nil, "nodeproxy_node_copy_reads_total", "mode", "offline")
	if err := sleepUntil(ctx, cut.Add(l.Outage)); err != nil {
		return o, err
	}

	s.env.progressf("nodeview (%s): bringing kube-apiserver and the hub back", s.way)
	back := time.Now()
	if err := local.ControlPlane.RestartAPIServer(ctx); err != nil {
		return o, err
	}
	o.apiReady = time.Since(back)
	hub, err := local.Hub.StartReplica(ctx, local.Hub.Port, "nodeproxy")
	if err != nil {
		return o, fmt.Errorf("start the hub again: %w", err)
	}
	// Whoever stops the hub stops this one now.
	local.Hub.Process = hub.Process
	o.hubReady = time.Since(back)
	ready := time.Now()
	o.readyAt = ready

	// The admin client's connection died with kube-apiserver; its first
	// request may fail while it dials again.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := s.admin.CoreV1().Namespaces().Get(ctx, s.ns, metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return o, fmt.Errorf("reach kube-apiserver once back: %w", err)
	}
	updated, err := s.updateSecrets(ctx, outageValue)
	if err != nil {
		return o, err
	}
	want, err := s.versions(ctx)
	if err != nil {
		return o, err
	}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		ms, err := s.scrapeEndpoints(ctx)
		if err != nil {
			return false, nil
		}
		for _, m := range ms {
			if m.Sum("nodeproxy_node_offline_since_seconds") != 0 || m.Sum("nodeproxy_node_hub_connected") != 1 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return o, fmt.Errorf("endpoints not all following their hub again: %w", err)
	}
	o.online = time.Since(ready)
	if err := s.waitCurrent(ctx, want); err != nil {
		return o, err
	}
	o.current = time.Since(ready)
	s.env.progressf("nodeview (%s): every endpoint online %.1fs and every copy current %.1fs after kube-apiserver and the hub were ready; waiting for the files",
		s.way, o.online.Seconds(), o.current.Seconds())
	if o.fileLatencies, err = waitFiles(ctx, s.secretFiles(), outageValue, updated); err != nil {
		return o, err
	}
	if o.checked, o.stale, err = s.staleObjects(ctx, want); err != nil {
		return o, err
	}
	o.countEvents(logs, names, want, &restarts)

	hubMetrics, err := s.t.Nodeproxy.Metrics(ctx)
	if err != nil {
		return o, err
	}
	o.hubChannels = hubMetrics.Sum("nodeproxy_watchmux_channels") / float64(len(s.nodes))
	o.opens = map[string]float64{}
	for _, how := range []string{"initial", "resumed", "replaced", "expired", "refused"} {
		o.opens[how] = hubMetrics.Sum("nodeproxy_nodeview_opens_total", "how", how)
	}
	api, err := ScrapeAPIServer(ctx, s.admin.CoreV1().RESTClient())
	if err != nil {
		return o, err
	}
	// kube-apiserver's counters began with its restart.
	o.apiserverReads = readsOf(requestsServed(Metrics{}, api))
	after, err := s.scrapeEndpoints(ctx)
	if err != nil {
		return o, err
	}
	o.reopened = sumEndpoints(after, nil, "nodeproxy_node_view_reopens_total") - sumEndpoints(before, nil, "nodeproxy_node_view_reopens_total")
	o.watches, o.offNodeWatches = openWatches(after)
	o.nodeReads = readsByPath(before, after, nil)
	o.offNode = readsByResource(before, after, nil, "apiserver")
	for k, v := range readsByResource(before, after, nil, "hub") {
		o.offNode["hub: "+k] += v
	}
	s.env.progressf("nodeview (%s): %d of %d objects stale, %d of %d followed secrets lost, %d events repeated; hub view opens %v",
		s.way, o.stale, o.checked, o.lost, o.watched, o.repeated, o.opens)
	return o, nil
}

func notUpNote(o viewOutage) string {
	if o.notUp == 0 {
		return ""
	}
	return fmt.Sprintf("; %d not (last: %s)", o.notUp, o.lastNotUp)
}

// versions are kube-apiserver's resourceVersions of the run's secrets
// and configmaps, by name.
func (s *viewSide) versions(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	secrets, err := s.admin.CoreV1().Secrets(s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, o := range secrets.Items {
		out[o.Name] = o.ResourceVersion
	}
	configmaps, err := s.admin.CoreV1().ConfigMaps(s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, o := range configmaps.Items {
		out[o.Name] = o.ResourceVersion
	}
	return out, nil
}

// waitCurrent waits until every node's copy holds each of its secrets at
// want's version: a get at resourceVersion "0" through the node's
// endpoint, which the copy answers as it is.
func (s *viewSide) waitCurrent(ctx context.Context, want map[string]string) error {
	pending := make([][]string, len(s.nodes))
	for i := range s.nodes {
		for _, pod := range s.secrets[i] {
			pending[i] = append(pending[i], pod...)
		}
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		left := 0
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(4)
		var mu sync.Mutex
		for i := range pending {
			g.Go(func() error {
				var still []string
				for _, name := range pending[i] {
					got, err := s.asNode[i].CoreV1().Secrets(s.ns).Get(gctx, name, metav1.GetOptions{ResourceVersion: "0"})
					if err != nil || got.ResourceVersion != want[name] {
						still = append(still, name)
						mu.Lock()
						last = fmt.Sprintf("%s on %s: %v", name, s.nodes[i].Name, describeVersion(got, err))
						mu.Unlock()
					}
				}
				mu.Lock()
				pending[i], left = still, left+len(still)
				mu.Unlock()
				return nil
			})
		}
		_ = g.Wait()
		return left == 0, nil
	})
	if err != nil {
		return fmt.Errorf("copies not all current (last: %s): %w", last, err)
	}
	return nil
}

func describeVersion(o metav1.Object, err error) string {
	if err != nil {
		return err.Error()
	}
	return "resourceVersion " + o.GetResourceVersion()
}

// staleObjects reads every object of every node's pods through its
// endpoint at resourceVersion "" (a consistent read) and counts those
// whose version is not want's.
func (s *viewSide) staleObjects(ctx context.Context, want map[string]string) (checked, stale int, err error) {
	l := s.env.Kubelets
	var n, bad atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for i := range s.nodes {
		g.Go(func() error {
			for p := range l.PodsPerNode {
				for o := range l.ObjectsPerPod {
					name := objectName(i, p, o)
					var rv string
					if isSecret(l, o) {
						got, err := s.asNode[i].CoreV1().Secrets(s.ns).Get(gctx, name, metav1.GetOptions{})
						if err == nil {
							rv = got.ResourceVersion
						}
					} else {
						got, err := s.asNode[i].CoreV1().ConfigMaps(s.ns).Get(gctx, name, metav1.GetOptions{})
						if err == nil {
							rv = got.ResourceVersion
						}
					}
					n.Add(1)
					if rv != want[name] {
						bad.Add(1)
						s.env.progressf("nodeview (%s): %s through %s: resourceVersion %q, kube-apiserver's %q", s.way, name, s.nodes[i].Name, rv, want[name])
					}
				}
			}
			return nil
		})
	}
	err = g.Wait()
	return int(n.Load()), int(bad.Load()), err
}

// secretFiles are every pod's secret files, in each kubelet's current
// root directory.
func (s *viewSide) secretFiles() []mountedFile {
	var files []mountedFile
	for i, n := range s.nodes {
		for p, uid := range s.uids[i] {
			for _, name := range s.secrets[i][p] {
				files = append(files, mountedFile{path: n.Kubelet.SecretVolumeFile(uid, name, "value"), secret: name})
			}
		}
	}
	return files
}

// countEvents reads the followed secrets' logs, once each has had time
// to show its update: each should hold exactly one event, at the
// update's version, or, after a 410, a list that holds it.
func (o *viewOutage) countEvents(logs []*channelLog, names []string, want map[string]string, restarts *atomic.Int64) {
	deadline := time.Now().Add(failoverDeliveryTimeout)
	o.watched = len(logs)
	for k, lg := range logs {
		rv := parseRV(want[names[k]])
		for time.Now().Before(deadline) {
			lg.mu.Lock()
			seen := slices.Contains(lg.rvs, rv) || slices.Contains(lg.listed, rv) || lg.final != nil
			lg.mu.Unlock()
			if seen {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		lg.mu.Lock()
		o.relists += lg.relists
		switch {
		case lg.final != nil:
			o.ended++
		case slices.Contains(lg.rvs, rv):
		case slices.Contains(lg.listed, rv):
			o.byRelist++
		default:
			o.lost++
		}
		_, repeated, extra := lg.repeats(func(v uint64) bool { return v == rv })
		o.repeated += repeated
		o.extra += extra
		lg.mu.Unlock()
	}
	o.watchRestarts = restarts.Load()
}

func parseRV(s string) uint64 {
	var v uint64
	_, _ = fmt.Sscan(s, &v)
	return v
}

func (o *nodeViewOutcome) outageFigures() []Figure {
	u := o.outage
	p := "outage: "
	out := []Figure{
		{p + "kube-apiserver and the hub stopped for", u.length.Seconds(), "s"},
		{p + "time to every endpoint offline", u.offlineTook.Seconds(), "s"},
		{p + "kubelets restarted during it (a fresh root directory)", float64(u.restarted), ""},
		{p + "of them, pods Running with their files while offline", float64(len(u.upOffline)), ""},
		{p + "time to pods Running with their files offline, longest", maxDuration(u.upOffline).Seconds(), "s"},
		{p + "the kubelets' reads answered offline from the copies", u.offlineReads, ""},
		{p + "time to kube-apiserver ready, from the return", u.apiReady.Seconds(), "s"},
		{p + "time to the hub ready, from the return", u.hubReady.Seconds(), "s"},
		{p + "time to every endpoint following its hub, from both ready", u.online.Seconds(), "s"},
		{p + "time to every node's copy holding kube-apiserver's secrets, from both ready (every secret updated then)", u.current.Seconds(), "s"},
		{p + "objects read through their node's endpoint at the end (resourceVersion \"\")", float64(u.checked), ""},
		{p + "of them, stale (not kube-apiserver's resourceVersion)", float64(u.stale), ""},
		{p + "secrets followed through one endpoint, as the kubelet reads them", float64(u.watched), ""},
		{p + "of them, update lost", float64(u.lost), ""},
		{p + "events repeated", float64(u.repeated), ""},
		{p + "events other than the update", float64(u.extra), ""},
		{p + "watches ended with an error", float64(u.ended), ""},
		{p + "watches ended cleanly and opened again", float64(u.watchRestarts), ""},
		{p + "lists again after a 410 (as a reflector does)", float64(u.relists), ""},
		{p + "updates seen in such a list rather than as an event", float64(u.byRelist), ""},
		{p + "endpoint views opened afresh after a 410", u.reopened, ""},
	}
	for _, how := range []string{"initial", "resumed", "replaced", "expired", "refused"} {
		out = append(out, Figure{p + "hub node view opens since its return: " + how, u.opens[how], ""})
	}
	out = append(out,
		Figure{p + "the kubelets' reads that left their nodes over the outage and return, to the hub", u.nodeReads["hub"], ""},
		Figure{p + "the kubelets' reads that left their nodes over the outage and return, to kube-apiserver", u.nodeReads["apiserver"], ""})
	for _, k := range u.offNode.sortedKeys() {
		if u.offNode[k] >= 1 {
			out = append(out, Figure{p + "a read that left a node: " + k, u.offNode[k], ""})
		}
	}
	for _, path := range []string{"copy", "hub", "apiserver"} {
		out = append(out, Figure{p + "the kubelet's open watches per node at the end: " + path, u.watches[path], ""})
	}
	out = append(out, Figure{p + "hub channels per node at the end (the hub started afresh at the return)", u.hubChannels, ""})
	for _, k := range u.offNodeWatches.sortedKeys() {
		if u.offNodeWatches[k] < 1 {
			continue
		}
		out = append(out, Figure{p + "the kubelets' watches off the copy at the end, every node: " + k, u.offNodeWatches[k], ""})
	}
	if o.load.Settle > 0 {
		out = append(out,
			Figure{p + "time to one hub channel per node again, from both ready (0: not within --view-settle)", u.settled.Seconds(), "s"},
			Figure{p + "hub channels per node then", u.settledChannels, ""})
		for _, path := range []string{"copy", "hub", "apiserver"} {
			out = append(out, Figure{p + "the kubelet's open watches per node then: " + path, u.settledWatches[path], ""})
		}
	}
	out = append(out, Figure{p + "kube-apiserver GET, LIST and WATCH from its return to the end of the checks", u.apiserverReads.total(), ""})
	for _, k := range u.apiserverReads.sortedKeys() {
		if u.apiserverReads[k] >= 1 {
			out = append(out, Figure{p + "kube-apiserver since its return: " + k, u.apiserverReads[k], ""})
		}
	}
	return out
}

// settle follows the hub's channels for at most l.Settle, until they
// are one per node again (the views alone), and reads where the
// kubelets' watches are then.
func (s *viewSide) settle(ctx context.Context, l NodeViewLoad, o *viewOutage) error {
	s.env.progressf("nodeview (%s): following the hub's channels for up to %s, until they are one per node again", s.way, l.Settle)
	n := float64(len(s.nodes))
	err := wait.PollUntilContextTimeout(ctx, 10*time.Second, l.Settle, true, func(ctx context.Context) (bool, error) {
		m, err := s.t.Nodeproxy.Metrics(ctx)
		if err != nil {
			return false, nil
		}
		o.settledChannels = m.Sum("nodeproxy_watchmux_channels") / n
		return o.settledChannels <= 1, nil
	})
	if err == nil {
		o.settled = time.Since(o.readyAt)
	} else if ctx.Err() != nil {
		return ctx.Err()
	}
	ms, err := s.scrapeEndpoints(ctx)
	if err != nil {
		return err
	}
	o.settledWatches, _ = openWatches(ms)
	s.env.progressf("nodeview (%s): hub channels per node %.2f, %.0fs after the return", s.way, o.settledChannels, time.Since(o.readyAt).Seconds())
	return nil
}
