package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// KubeletComparison is the kubelets scenario cut to what make demo can
// wait for: the same number of hollow kubelets, with the same pods
// mounting the same secrets and configmaps, once behind node endpoints
// and once straight on kube-apiserver, each measured over one window of
// the same length from the creation of its pods, instead of pairs of
// rounds. The kubelets start before the window, so that it holds what
// their pods cost and not their registration; the pods start in
// parallel, at the kubelets' own pace, so no figure waits on one request
// after another.
type KubeletComparison struct {
	Load   KubeletLoad
	Window time.Duration
	// Direct and Fronted are the two ways.
	Direct, Fronted KubeletWindow
}

// KubeletWindow is one way's window.
type KubeletWindow struct {
	// LongRunning are the long-running requests the kubelets (and their
	// endpoints) hold open on kube-apiserver once their pods run, read
	// after the window (LongRunningFrom).
	LongRunning controlplane.LongRunningRequests
	// APIServerCPU, HubCPU and EndpointsCPU (every endpoint's, none
	// direct) are over the window. The hub runs both ways, its informers
	// hearing the pods either way.
	APIServerCPU, HubCPU, EndpointsCPU time.Duration
	// HubAsked are the hub's requests to kube-apiserver for its
	// consistent reads in the window: its current version of a type (a
	// list of one item) and probes of a quiet type (a watch until a
	// bookmark).
	HubAsked float64
	// UpTook is from the pods' creation to every pod Running with every
	// file written.
	UpTook time.Duration
	// Took is the window: its length, or more when its pods took longer.
	Took time.Duration
}

// CompareKubelets runs env.Kubelets' nodes and pods (Nodes, PodsPerNode,
// ObjectsPerPod; Pairs, Round and Idle are not used) over one window of
// the given length each way, behind endpoints first: whatever a fresh
// kube-apiserver pays once (caches filling, connections) falls on
// nodeproxy's side, not on the status quo's.
func CompareKubelets(ctx context.Context, env *Env, t Target, window time.Duration) (_ *KubeletComparison, err error) {
	if t.Local == nil || len(t.Local.NodeEndpoint) == 0 {
		return nil, errors.New("the kubelets comparison runs hollow kubelets and node endpoints on this machine: it needs the local control plane and a nodeproxy binary")
	}
	kubemark, admin, run, dir, err := hollowRun(ctx, env, t, "compare-kubelets")
	if err != nil {
		return nil, err
	}
	base := sideRun{env: env, t: t, admin: admin, ns: run}
	defer func() {
		err = errors.Join(err, cleanUp(ctx, admin, run))
		_ = os.RemoveAll(dir)
	}()
	if err := controlplane.EnsureNamespace(ctx, admin, run, map[string]string{benchLabel: run}); err != nil {
		return nil, err
	}
	if err := base.createObjects(ctx); err != nil {
		return nil, err
	}
	c := &KubeletComparison{Load: env.Kubelets, Window: window}
	for k, way := range []struct {
		name    string
		fronted bool
		into    *KubeletWindow
	}{{"behind endpoints", true, &c.Fronted}, {"direct", false, &c.Direct}} {
		s := base
		s.way, s.nodes = way.name, make([]*HollowNode, env.Kubelets.Nodes)
		if *way.into, err = s.window(ctx, k, way.fronted, kubemark, dir, window); err != nil {
			return nil, fmt.Errorf("%s: %w", way.name, err)
		}
	}
	return c, nil
}

// window starts the side's kubelets, then measures round k: its pods
// created, Running with their files, and the rest of the window idle
// with them running. It stops the kubelets and deletes the pods after.
func (s *sideRun) window(ctx context.Context, k int, fronted bool, kubemark, dir string, length time.Duration) (w KubeletWindow, err error) {
	label := fmt.Sprintf("%s-%d", s.ns, k)
	defer func() {
		// One at a time, each stop's grace would add up.
		var stops sync.WaitGroup
		for _, n := range s.nodes {
			if n != nil {
				stops.Go(n.Stop)
			}
		}
		stops.Wait()
		// Their kubelets are gone and would never confirm a graceful
		// deletion.
		if derr := s.admin.CoreV1().Pods(s.ns).DeleteCollection(context.WithoutCancel(ctx), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, roundPods(k)); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete the pods of %s: %w", s.way, derr))
		}
		err = errors.Join(err, cleanUp(ctx, s.admin, label))
	}()
	before, err := controlplane.ReadLongRunningRequests(ctx, s.admin.CoreV1().RESTClient())
	if err != nil {
		return w, err
	}
	l := s.env.Kubelets
	bar := s.env.phase(l.Nodes, "%s: starting %d hollow kubelets", s.way, l.Nodes)
	err = startHollowNodes(ctx, s.t, s.admin, kubemark, dir, label, s.nodes, HollowNodeSpec{Fronted: fronted}, bar)
	bar.Done()
	if err != nil {
		return w, err
	}
	if err := waitLeases(ctx, s.admin, s.nodes); err != nil {
		return w, err
	}

	began := time.Now()
	apiStart, hubStart, err := serverUsage(s.t)
	if err != nil {
		return w, err
	}
	endpointsStart, err := endpointUsage(s.nodes)
	if err != nil {
		return w, err
	}
	askedStart, err := hubAsked(ctx, s.t)
	if err != nil {
		return w, err
	}
	files, err := s.createPods(ctx, k, true)
	if err != nil {
		return w, err
	}
	if err := s.waitPods(ctx, k, corev1.PodRunning); err != nil {
		return w, err
	}
	if _, err := waitFiles(ctx, files, "v", nil); err != nil {
		return w, err
	}
	w.UpTook = time.Since(began)
	if err := sleepUntil(ctx, began.Add(length)); err != nil {
		return w, err
	}
	apiEnd, hubEnd, err := serverUsage(s.t)
	if err != nil {
		return w, err
	}
	endpointsEnd, err := endpointUsage(s.nodes)
	if err != nil {
		return w, err
	}
	askedEnd, err := hubAsked(ctx, s.t)
	if err != nil {
		return w, err
	}
	w.HubAsked = askedEnd - askedStart
	w.Took = time.Since(began)
	w.APIServerCPU, w.HubCPU = apiEnd.CPU-apiStart.CPU, hubEnd.CPU-hubStart.CPU
	for i, u := range endpointsEnd {
		w.EndpointsCPU += u.CPU - endpointsStart[i].CPU
	}
	if w.LongRunning, err = LongRunningFrom(ctx, s.admin.CoreV1().RESTClient(), before); err != nil {
		return w, err
	}
	s.env.progressf("%s: pods Running with their files %.1f s after their creation; kube-apiserver CPU %.2f s in the window",
		s.way, w.UpTook.Seconds(), w.APIServerCPU.Seconds())
	return w, nil
}

// hubAsked is the hub's count of requests to kube-apiserver for
// consistent reads so far, every type's.
func hubAsked(ctx context.Context, t Target) (float64, error) {
	m, err := t.Nodeproxy.Metrics(ctx)
	if err != nil {
		return 0, fmt.Errorf("scrape the hub: %w", err)
	}
	return m.Sum("nodeproxy_bulk_latest_version_requests_total") + m.Sum("nodeproxy_bulk_progress_probes_total"), nil
}

// WriteTable writes both ways side by side.
func (c *KubeletComparison) WriteTable(w io.Writer) error {
	l := c.Load
	fmt.Fprintf(w, "%d hollow kubelets, %d pods mounting %d secrets and configmaps; each way, a %s window from the pods' creation\n\n",
		l.Nodes, l.Nodes*l.PodsPerNode, l.Nodes*l.PodsPerNode*l.ObjectsPerPod, c.Window)
	d, f := c.Direct, c.Fronted
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tdirect\tbehind endpoints\t")
	count := func(name string, a, b float64) { fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t\n", name, a, b) }
	secs := func(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
	objectWatches := func(lr controlplane.LongRunningRequests) float64 {
		return float64(lr.Count("WATCH", "secrets") + lr.Count("WATCH", "configmaps"))
	}
	count("long-running requests on kube-apiserver from the kubelets", float64(d.LongRunning.Count("", "")), float64(f.LongRunning.Count("", "")))
	count("  of them, watches of secrets and configmaps", objectWatches(d.LongRunning), objectWatches(f.LongRunning))
	fmt.Fprintf(tw, "kube-apiserver CPU in the window\t%s\t%s\t\n", secs(d.APIServerCPU), secs(f.APIServerCPU))
	count("the hub's requests to kube-apiserver for consistent reads", d.HubAsked, f.HubAsked)
	fmt.Fprintf(tw, "hub CPU in the window (it runs both times)\t%s\t%s\t\n", secs(d.HubCPU), secs(f.HubCPU))
	fmt.Fprintf(tw, "node endpoints' CPU in the window, all\t-\t%s\t\n", secs(f.EndpointsCPU))
	fmt.Fprintf(tw, "pods Running with their files, from their creation\t%.1f s\t%.1f s\t\n", d.UpTook.Seconds(), f.UpTook.Seconds())
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, way := range []struct {
		name string
		w    KubeletWindow
	}{{"direct", d}, {"behind endpoints", f}} {
		if way.w.Took > c.Window+time.Second {
			fmt.Fprintf(w, "(%s: the pods took longer than the window, which ran %.1f s)\n", way.name, way.w.Took.Seconds())
		}
	}
	return nil
}
