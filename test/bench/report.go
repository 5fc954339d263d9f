package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// WriteTable writes the comparison as a table: one column per server in
// each way of watching, then the ratio of the status quo to nodeproxy's
// way with both servers counted.
func (r *WatchComparison) WriteTable(w io.Writer) error {
	s := r.Shape
	fmt.Fprintf(w, "%d nodes x %d watches (%d secrets of %d B in %d namespaces), %d updates delivering %d events\n\n",
		s.Nodes, s.SecretsPerNode+1, s.Namespaces+s.Nodes*s.SecretsPerNode, s.ObjectSize, s.Namespaces,
		s.Namespaces*s.SharedUpdates+s.Nodes, s.Nodes*(s.SharedUpdates+1))
	if !r.NodeproxyMeasured {
		fmt.Fprintf(w, "nodeproxy's process was out of reach: its column is empty, the ratios count kube-apiserver alone\n\n")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	np, sq := r.Nodeproxy, r.StatusQuo
	fmt.Fprintln(tw, "\tstatus quo\twith nodeproxy\twith nodeproxy\tratio\t")
	fmt.Fprintln(tw, "\tkube-apiserver\tkube-apiserver\tnodeproxy\tstatus quo / both\t")
	row := func(name string, quo, api, prox float64, format string) {
		ratio := "-"
		if api+prox > 0 {
			ratio = fmt.Sprintf("%.1fx", quo/(api+prox))
		}
		fmt.Fprintf(tw, "%s\t"+format+"\t"+format+"\t"+format+"\t%s\t\n", name, quo, api, prox, ratio)
	}
	secs := func(d time.Duration) float64 { return d.Seconds() }
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	row("watches on kube-apiserver", float64(sq.APIServerWatches), float64(np.APIServerWatches), 0, "%.0f")
	fmt.Fprintf(tw, "watches added by the nodes\t%d\t%d\t%d channels\t\t\n", sq.APIServerWatches-sq.APIServerWatchesBefore,
		np.APIServerWatches-np.APIServerWatchesBefore, np.Channels)
	row("CPU s, opening", secs(sq.APIServer.OpenCPU), secs(np.APIServer.OpenCPU), secs(np.Nodeproxy.OpenCPU), "%.2f")
	row(fmt.Sprintf("CPU s, idle %s", s.Idle), secs(sq.APIServer.IdleCPU), secs(np.APIServer.IdleCPU), secs(np.Nodeproxy.IdleCPU), "%.2f")
	row("CPU s, updates", secs(sq.APIServer.UpdateCPU), secs(np.APIServer.UpdateCPU), secs(np.Nodeproxy.UpdateCPU), "%.2f")
	row("RSS MiB, watches open", mib(sq.APIServer.RSSOpen), mib(np.APIServer.RSSOpen), mib(np.Nodeproxy.RSSOpen), "%.0f")
	row("RSS MiB added by the watches", mib(sq.APIServer.RSSOpen-sq.APIServer.RSSBefore), mib(np.APIServer.RSSOpen-np.APIServer.RSSBefore),
		mib(np.Nodeproxy.RSSOpen-np.Nodeproxy.RSSBefore), "%.0f")
	row("goroutines, watches open", float64(sq.APIServer.GoroutinesOpen), float64(np.APIServer.GoroutinesOpen), float64(np.Nodeproxy.GoroutinesOpen), "%.0f")
	row("goroutines added by the watches", float64(sq.APIServer.GoroutinesOpen-sq.APIServer.GoroutinesBefore),
		float64(np.APIServer.GoroutinesOpen-np.APIServer.GoroutinesBefore), float64(np.Nodeproxy.GoroutinesOpen-np.Nodeproxy.GoroutinesBefore), "%.0f")
	fmt.Fprintf(tw, "time to open every watch\t%s\t%s\t\t\t\n", sq.OpenTook.Round(time.Millisecond), np.OpenTook.Round(time.Millisecond))
	fmt.Fprintf(tw, "time to deliver every update\t%s\t%s\t\t\t\n", sq.UpdateTook.Round(time.Millisecond), np.UpdateTook.Round(time.Millisecond))
	return tw.Flush()
}
