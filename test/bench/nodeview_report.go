package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// writeTables writes the nodeview scenario's three parts as tables to
// the run's progress, for docs/benchmarks.md: the figures are the
// result's, side by side where there are two sides.
func (o *nodeViewOutcome) writeTables(env *Env) {
	if env.Progress != nil {
		_ = o.WriteTables(env.Progress)
	}
}

// WriteTables writes one table per part.
func (o *nodeViewOutcome) WriteTables(w io.Writer) error {
	l, p, c := o.load, o.perObject, o.copied
	mib := func(b float64) float64 { return b / (1 << 20) }
	fmt.Fprintf(w, "\n%d hollow kubelets, %d pods x %d secrets and configmaps each\n\n", l.Nodes, l.PodsPerNode, l.ObjectsPerPod)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "channels and memory\ta channel per object\tthe copy\tratio\t")
	row := func(name string, a, b float64, format string) {
		ratio := "-"
		if b > 0 {
			ratio = fmt.Sprintf("%.1fx", a/b)
		}
		fmt.Fprintf(tw, "%s\t"+format+"\t"+format+"\t%s\t\n", name, a, b, ratio)
	}
	row("hub channels per node", p.channels, c.channels, "%.1f")
	row("hub live heap per node, MiB", mib(p.heap), mib(c.heap), "%.2f")
	row("endpoint RSS per node, mean, MiB", meanMiB(p.rss), meanMiB(c.rss), "%.1f")
	row("endpoint RSS per node, max, MiB", maxMiB(p.rss), maxMiB(c.rss), "%.1f")
	row("objects in the copy per node", 0, c.copyObjects, "%.0f")
	for _, path := range []string{"copy", "hub", "apiserver"} {
		row("the kubelet's open watches per node, "+path, p.watches[path], c.watches[path], "%.1f")
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	r := o.restart
	fmt.Fprintf(w, "\n%d kubelet(s) restarted behind copy endpoints, pods Running with their files in %.1f s\n\n", r.kubelets, maxDuration(r.took).Seconds())
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kubelet restart\tcopy\tLease memory\thub\tkube-apiserver\t")
	fmt.Fprintf(tw, "the kubelets' GET, LIST and WATCH\t%.0f\t%.0f\t%.0f\t%.0f\t\n", r.reads["copy"], r.reads["memory"], r.reads["hub"], r.reads["apiserver"])
	fmt.Fprintf(tw, "progress requests (websocket messages)\t%.0f\t\t\t\t\n", r.progress)
	fmt.Fprintf(tw, "hub channels opened, bulk gets (every node's)\t\t\t%.0f, %.0f\t\t\n", r.hubOpened, r.hubGets)
	fmt.Fprintf(tw, "kube-apiserver GET, LIST, WATCH (every client's)\t\t\t\t%.0f\t\n", r.apiserverReads.total())
	if err := tw.Flush(); err != nil {
		return err
	}

	u := o.outage
	fmt.Fprintf(w, "\nkube-apiserver and the hub stopped for %s\n\n", u.length)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "outage\t\t")
	fmt.Fprintf(tw, "kubelets restarted offline, pods Running with files\t%d of %d\t\n", len(u.upOffline), u.restarted)
	fmt.Fprintf(tw, "  time, longest\t%.1f s\t\n", maxDuration(u.upOffline).Seconds())
	fmt.Fprintf(tw, "reads answered offline\t%.0f\t\n", u.offlineReads)
	fmt.Fprintf(tw, "return: kube-apiserver ready, hub ready\t%.1f s, %.1f s\t\n", u.apiReady.Seconds(), u.hubReady.Seconds())
	fmt.Fprintf(tw, "then every endpoint online, every copy current\t%.1f s, %.1f s\t\n", u.online.Seconds(), u.current.Seconds())
	fmt.Fprintf(tw, "stale objects\t%d of %d\t\n", u.stale, u.checked)
	fmt.Fprintf(tw, "updates lost, events repeated, other events\t%d, %d, %d of %d\t\n", u.lost, u.repeated, u.extra, u.watched)
	fmt.Fprintf(tw, "watches ended by a 410 and listed again; updates seen in the list\t%d; %d\t\n", u.relists, u.byRelist)
	fmt.Fprintf(tw, "hub view opens: initial, resumed, replaced, expired\t%.0f, %.0f, %.0f, %.0f\t\n", u.opens["initial"], u.opens["resumed"], u.opens["replaced"], u.opens["expired"])
	fmt.Fprintf(tw, "kubelet reads off the nodes: hub, kube-apiserver\t%.0f, %.0f\t\n", u.nodeReads["hub"], u.nodeReads["apiserver"])
	fmt.Fprintf(tw, "the kubelet's watches per node at the end: copy, hub, kube-apiserver\t%.1f, %.1f, %.1f\t\n", u.watches["copy"], u.watches["hub"], u.watches["apiserver"])
	fmt.Fprintf(tw, "hub channels per node at the end\t%.1f\t\n", u.hubChannels)
	if l.Settle > 0 {
		fmt.Fprintf(tw, "one hub channel per node again, from both ready (0: not within %s)\t%.0f s\t\n", l.Settle, u.settled.Seconds())
		fmt.Fprintf(tw, "  hub channels per node then; the kubelet's watches: copy, hub\t%.2f; %.1f, %.1f\t\n", u.settledChannels, u.settledWatches["copy"], u.settledWatches["hub"])
	}
	fmt.Fprintf(tw, "kube-apiserver GET, LIST, WATCH since its return\t%.0f\t\n", u.apiserverReads.total())
	return tw.Flush()
}
