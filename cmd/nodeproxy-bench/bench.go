package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/nodeproxy/nodeproxy/internal/cli"
	"github.com/nodeproxy/nodeproxy/test/bench"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/workload"
)

// benchOptions are the flags of nodeproxy-bench.
type benchOptions struct {
	shape         workload.Shape
	watch         bench.WatchLoad
	kubelets      bench.KubeletLoad
	proxies       bench.ProxyLoad
	causal        bench.CausalLoad
	failover      bench.FailoverLoad
	nodeView      bench.NodeViewLoad
	shards        bench.ShardsLoad
	revokeRate    int
	phaseDuration time.Duration
	output        string
	chart         string
	// kubeconfig, when set, points the scenarios at that cluster instead
	// of nodeproxy in this process.
	kubeconfig string
	// nodeproxy is the hub binary the local control plane runs as
	// `nodeproxy serve`; "" is the nodeproxy beside this binary, as make
	// build lays them out.
	nodeproxy string
}

func newBenchOptions() *benchOptions {
	return &benchOptions{shape: workload.ReferenceShape(), watch: bench.DefaultWatchLoad(), kubelets: bench.DefaultKubeletLoad(), proxies: bench.DefaultProxyLoad(),
		causal: bench.DefaultCausalLoad(), failover: bench.DefaultFailoverLoad(), nodeView: bench.DefaultNodeViewLoad(), shards: bench.DefaultShardsLoad(),
		revokeRate: 200, phaseDuration: 2 * time.Second, output: "table"}
}

func (o *benchOptions) flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	fs := fss.FlagSet("cluster shape")
	s := &o.shape
	fs.IntVar(&s.Nodes, "nodes", s.Nodes, "Nodes.")
	fs.IntVar(&s.PodsPerNode, "pods-per-node", s.PodsPerNode, "Pods bound to each node.")
	fs.IntVar(&s.Namespaces, "namespaces", s.Namespaces, "Namespaces the pods are spread over.")
	fs.IntVar(&s.UniqueSecretsPerPod, "secrets-per-pod", s.UniqueSecretsPerPod, "Secrets only one pod uses, per pod.")
	fs.IntVar(&s.UniqueConfigMapsPerPod, "configmaps-per-pod", s.UniqueConfigMapsPerPod, "ConfigMaps only one pod uses, per pod.")
	fs.IntVar(&s.UniquePVCsPerPod, "pvcs-per-pod", s.UniquePVCsPerPod, "PersistentVolumeClaims per pod, each bound to its own PersistentVolume with a secret.")
	fs.IntVar(&s.SharedSecretsPerPod, "shared-secrets-per-pod", s.SharedSecretsPerPod, "Secrets each pod picks among its namespace's shared ones.")
	fs.IntVar(&s.SharedSecretsPerNamespace, "shared-secrets-per-namespace", s.SharedSecretsPerNamespace,
		"Shared secrets per namespace; 0 means as many as --shared-secrets-per-pod.")
	fs.IntVar(&s.AttachmentsPerNode, "attachments-per-node", s.AttachmentsPerNode, "VolumeAttachments per node.")
	fs.Int64Var(&s.Seed, "seed", s.Seed, "Seed of the choice of shared objects.")

	fs = fss.FlagSet("watchers")
	w := &o.watch
	fs.IntVar(&w.Nodes, "watch-nodes", w.Nodes, "Nodes holding a bulk watch websocket (at most --nodes).")
	fs.IntVar(&w.ChannelsPerNode, "channels-per-node", w.ChannelsPerNode, "Channels per node: the secrets and configmaps its pods use, first pod first, up to this many.")
	fs.IntVar(&w.ObjectSize, "object-size", w.ObjectSize, "Bytes of data in each secret and configmap.")
	fs.IntVar(&w.Updates, "updates", w.Updates, "Back-to-back updates per sustained round (at most 1000: a channel queues 1024 events).")

	fs.IntVar(&o.revokeRate, "revoke-rate", o.revokeRate, "Pod deletions per second in the revoke scenario.")

	fs = fss.FlagSet("causal")
	c := &o.causal
	fs.IntVar(&c.Nodes, "causal-nodes", c.Nodes, "Nodes in the causal scenario; each watches its pods on both sides.")
	fs.IntVar(&c.Pods, "causal-pods", c.Pods, "Pods the causal scenario binds, each with a fresh Secret.")
	fs.IntVar(&c.Rate, "causal-rate", c.Rate, "Pods bound per second in the causal scenario.")

	fs = fss.FlagSet("kubelets")
	k := &o.kubelets
	fs.IntVar(&k.Nodes, "kubelet-nodes", k.Nodes, "Hollow kubelets in the kubelets scenario (about 80 MB each, plus its endpoint's).")
	fs.IntVar(&k.PodsPerNode, "kubelet-pods", k.PodsPerNode, "Pods bound to each hollow kubelet.")
	fs.IntVar(&k.ObjectsPerPod, "kubelet-objects", k.ObjectsPerPod, "Secrets and configmaps each pod mounts (half each, its own).")
	fs.IntVar(&k.Pairs, "kubelet-pairs", k.Pairs, "Pairs of rounds on each side: the pods mounting emptyDir volumes, then the same pods mounting their objects instead (or the other way); what the objects cost is the median difference.")
	fs.DurationVar(&k.Round, "kubelet-round", k.Round, "How long a round lasts: a quarter for the pods to come up, half for every secret's update to reach the files, a quarter to delete the pods. "+
		"A round whose work takes longer is counted in the results; raise it then.")
	fs.DurationVar(&k.Idle, "kubelet-idle", k.Idle, "How long kube-apiserver and the endpoints are measured with nothing changing and the mounting pods running, after the rounds.")

	fs = fss.FlagSet("proxies")
	p := &o.proxies
	fs.IntVar(&p.Nodes, "proxy-nodes", p.Nodes, "Nodes in the proxies scenario, each a hollow kubelet and a hollow proxy, and behind endpoints an endpoint both go through.")
	fs.IntVar(&p.Services, "proxy-services", p.Services, "Services whose EndpointSlices (one each) churn in the proxies scenario; as many unwatched slices churn in the rounds they are compared with.")
	fs.DurationVar(&p.Churn, "proxy-churn", p.Churn, "How long a churn round lasts in the proxies scenario.")
	fs.DurationVar(&p.Interval, "proxy-churn-interval", p.Interval, "How often, within a churn round, every EndpointSlice changes and one new one is created to time arrival at the proxies.")
	fs.IntVar(&p.Pairs, "proxy-pairs", p.Pairs, "Pairs of churn rounds on each side: slices the proxies watch, then as many they do not (or the other way); what delivering the churn costs is the median difference.")
	fs.DurationVar(&p.RestartWindow, "proxy-restart-window", p.RestartWindow, "How long after kube-apiserver's restart is ready its requests are counted in the proxies scenario.")
	fs.IntVar(&p.Nice, "proxy-nice", p.Nice, "Niceness (0 to 19) of the hub and every node's processes (hollow kubelet, hollow proxy, endpoint) in the proxies scenario, on both sides: in a cluster they run on other machines than kube-apiserver, here they take its CPU. 0 leaves them as started.")
	fs.StringVar(&p.Profiles, "proxy-profiles", p.Profiles, "A directory to write kube-apiserver's CPU profile of every churn round of the proxies scenario to (<way>-round<k>-<watched|unwatched>.<chunk>.pprof); none when empty.")

	fs = fss.FlagSet("failover")
	f := &o.failover
	fs.IntVar(&f.Conns, "failover-conns", f.Conns, "Bulk watch connections (watchmux.Session) in the failover scenario.")
	fs.IntVar(&f.Channels, "failover-channels", f.Channels, "Channels per connection in the failover scenario, one secret each.")
	fs.IntVar(&f.WriteRate, "failover-write-rate", f.WriteRate, "Secret updates per second in the failover scenario, round robin over the secrets.")
	fs.DurationVar(&f.Settle, "failover-settle", f.Settle, "How long writes go on in the failover scenario before a replica goes, and after.")
	fs.BoolVar(&f.Rolling, "failover-rolling", f.Rolling, "Also replace both replicas in turn (a rolling restart) in the failover scenario.")
	fs.BoolVar(&f.Endpoints, "failover-endpoints", f.Endpoints, "Also replace both replicas in turn under kubelet watches through node endpoints: one `nodeproxy node` per connection, its channels the secrets its node's pod mounts.")

	fs = fss.FlagSet("nodeview")
	v := &o.nodeView
	fs.IntVar(&v.Nodes, "view-nodes", v.Nodes, "Hollow kubelets in the nodeview scenario, each behind its own endpoint (about 80 MB each, plus its endpoint's).")
	fs.IntVar(&v.PodsPerNode, "view-pods", v.PodsPerNode, "Pods bound to each hollow kubelet in the nodeview scenario.")
	fs.IntVar(&v.ObjectsPerPod, "view-objects", v.ObjectsPerPod, "Secrets and configmaps each pod mounts in the nodeview scenario (half each, its own): a node's copy holds --view-pods times as many.")
	fs.IntVar(&v.Restarts, "view-restarts", v.Restarts, "Kubelets restarted behind copy endpoints, the control plane up, in the nodeview scenario.")
	fs.DurationVar(&v.Outage, "view-outage", v.Outage, "How long kube-apiserver and the hub are stopped in the nodeview scenario; a third of the kubelets restart meanwhile.")
	fs.DurationVar(&v.Settle, "view-settle", v.Settle, "How long, after the nodeview scenario's outage and checks, the hub's channels are followed until they are one per node again "+
		"(the kubelet's watches that went to hub channels come back to the copies when they end, at the kubelet's watch timeout of 5 to 10 minutes); 0 skips it.")
	fs.IntVar(&v.Services, "view-services", v.Services, "Services made in the cluster in the nodeview scenario, 100 to a namespace; each node gets a pod in two of their namespaces (its pods in three).")
	fs.IntVar(&v.EndpointSlices, "view-endpointslices", v.EndpointSlices, "EndpointSlices made in the cluster in the nodeview scenario, spread over --view-services' services.")
	fs.BoolVar(&v.CopyOnly, "view-copy-only", v.CopyOnly, "Skip the nodeview scenario's side with a channel per object (its figures are 0), for a shorter run.")
	fs.IntVar(&v.FillLog, "view-fill-log", v.FillLog, "Changes of pods and of Nodes written before each reading of the hub's heap in the nodeview scenario, to fill its change logs: its --cache-log-size, for the hub's heap per node to be what a node costs a replica of any size (docs/benchmarks.md, \"The node view\"); 0 writes none.")
	fs.StringVar(&v.Profiles, "view-profiles", v.Profiles, "A directory to write the hub's heap profiles to in the nodeview scenario, before and after each side's nodes (hub-heap-<side>-<before|after>.pprof); none when empty.")

	fs = fss.FlagSet("shards")
	sh := &o.shards
	fs.IntVar(&sh.Nodes, "shard-nodes", sh.Nodes, "Nodes in the shards scenario: Node objects, no kubelets; each node's view is followed by a client of its own.")
	fs.IntVar(&sh.PodsPerNode, "shard-pods", sh.PodsPerNode, "Pods bound to each node in the shards scenario, each mounting one of 100 configmaps.")
	fs.IntVar(&sh.Replicas, "shard-replicas", sh.Replicas, "Sharded hub replicas in the shards scenario (at least 2), beside the one unsharded replica they are compared with.")
	fs.IntVar(&sh.WriteRate, "shard-write-rate", sh.WriteRate, "Pod updates per second in the shards scenario while a replica is killed, node by node over every pod.")
	fs.DurationVar(&sh.Settle, "shard-settle", sh.Settle, "How long pod writes go on in the shards scenario before the replica is killed; they go on three times as long after.")

	fs = fss.FlagSet("target")
	fs.StringVar(&o.kubeconfig, "kubeconfig", o.kubeconfig, "Measure the cluster this kubeconfig reaches, with nodeproxy registered as its bulk.k8s.io APIService "+
		"(for example make demo's), instead of nodeproxy in this process. Objects are created through the API in namespaces and simulated nodes "+
		"labelled bench.nodeproxy.io/run, removed at the end; nodes are played by impersonation, so the kubeconfig's user must be allowed to impersonate. "+
		"Runs bulkget, fanout, revoke and apiserver.")
	fs.StringVar(&o.nodeproxy, "nodeproxy", o.nodeproxy, "The nodeproxy binary that serves in front of the local control plane (apiserver, kubelets and proxies scenarios "+
		"without --kubeconfig); empty for the nodeproxy beside this binary.")

	fs = fss.FlagSet("run")
	fs.DurationVar(&o.phaseDuration, "phase-duration", o.phaseDuration, "How long each timed phase of a scenario runs.")
	fs.StringVar(&o.output, "output", o.output, "table (for people) or json (for machines), on stdout.")
	fs.StringVar(&o.chart, "chart", o.chart, "Also write the latency distributions as an SVG chart to this file, one panel per scenario (also after an interrupted run).")
	return fss
}

func (o *benchOptions) validate() error {
	errs := []error{o.shape.Validate()}
	s := o.shape
	if s.SharedSecretsPerNamespace > 0 && s.SharedSecretsPerPod > s.SharedSecretsPerNamespace {
		errs = append(errs, fmt.Errorf("--shared-secrets-per-pod (%d) must not exceed --shared-secrets-per-namespace (%d): a pod picks among its namespace's",
			s.SharedSecretsPerPod, s.SharedSecretsPerNamespace))
	}
	if s.Namespaces > s.PodsPerNode*s.Nodes && s.Nodes > 0 && s.PodsPerNode > 0 {
		errs = append(errs, fmt.Errorf("--namespaces (%d) must not outnumber the pods (%d)", s.Namespaces, s.PodsPerNode*s.Nodes))
	}
	w := o.watch
	for _, f := range []struct {
		name  string
		value int
	}{{"--watch-nodes", w.Nodes}, {"--channels-per-node", w.ChannelsPerNode}, {"--object-size", w.ObjectSize}, {"--updates", w.Updates}, {"--revoke-rate", o.revokeRate},
		{"--causal-nodes", o.causal.Nodes}, {"--causal-pods", o.causal.Pods}, {"--causal-rate", o.causal.Rate},
		{"--failover-conns", o.failover.Conns}, {"--failover-channels", o.failover.Channels}, {"--failover-write-rate", o.failover.WriteRate},
		{"--proxy-nodes", o.proxies.Nodes}, {"--proxy-services", o.proxies.Services}, {"--proxy-pairs", o.proxies.Pairs},
		{"--shard-nodes", o.shards.Nodes}, {"--shard-pods", o.shards.PodsPerNode}, {"--shard-write-rate", o.shards.WriteRate},
		{"--view-nodes", o.nodeView.Nodes}, {"--view-pods", o.nodeView.PodsPerNode}, {"--view-objects", o.nodeView.ObjectsPerPod}, {"--view-restarts", o.nodeView.Restarts},
		{"--kubelet-nodes", o.kubelets.Nodes}, {"--kubelet-pods", o.kubelets.PodsPerNode}, {"--kubelet-objects", o.kubelets.ObjectsPerPod}, {"--kubelet-pairs", o.kubelets.Pairs}} {
		if f.value <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", f.name, f.value))
		}
	}
	if w.Updates > 1000 {
		errs = append(errs, fmt.Errorf("--updates must be at most 1000, got %d: more would overflow a channel's queue and close it", w.Updates))
	}
	if o.nodeView.Services < 0 || o.nodeView.EndpointSlices < 0 {
		errs = append(errs, fmt.Errorf("--view-services and --view-endpointslices may not be negative, got %d and %d", o.nodeView.Services, o.nodeView.EndpointSlices))
	}
	if o.nodeView.EndpointSlices > 0 && o.nodeView.Services == 0 {
		errs = append(errs, fmt.Errorf("--view-endpointslices needs --view-services: the slices are spread over the services"))
	}
	if o.nodeView.FillLog < 0 {
		errs = append(errs, fmt.Errorf("--view-fill-log may not be negative, got %d", o.nodeView.FillLog))
	}
	if o.nodeView.Outage <= 0 {
		errs = append(errs, fmt.Errorf("--view-outage must be positive, got %s", o.nodeView.Outage))
	}
	if o.shards.Replicas < 2 {
		errs = append(errs, fmt.Errorf("--shard-replicas must be at least 2, got %d: one replica is unsharded", o.shards.Replicas))
	}
	if o.shards.Settle <= 0 {
		errs = append(errs, fmt.Errorf("--shard-settle must be positive, got %s", o.shards.Settle))
	}
	if o.failover.Settle <= 0 {
		errs = append(errs, fmt.Errorf("--failover-settle must be positive, got %s", o.failover.Settle))
	}
	if o.kubelets.Idle <= 0 {
		errs = append(errs, fmt.Errorf("--kubelet-idle must be positive, got %s", o.kubelets.Idle))
	}
	if o.kubelets.Round <= 0 {
		errs = append(errs, fmt.Errorf("--kubelet-round must be positive, got %s", o.kubelets.Round))
	}
	for _, d := range []struct {
		name  string
		value time.Duration
	}{{"--proxy-churn", o.proxies.Churn}, {"--proxy-churn-interval", o.proxies.Interval}, {"--proxy-restart-window", o.proxies.RestartWindow}} {
		if d.value <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", d.name, d.value))
		}
	}
	if o.proxies.Interval > o.proxies.Churn {
		errs = append(errs, fmt.Errorf("--proxy-churn-interval (%s) must not exceed --proxy-churn (%s)", o.proxies.Interval, o.proxies.Churn))
	}
	if o.phaseDuration <= 0 {
		errs = append(errs, fmt.Errorf("--phase-duration must be positive, got %s", o.phaseDuration))
	}
	if o.kubeconfig != "" {
		if _, err := os.Stat(o.kubeconfig); err != nil {
			errs = append(errs, fmt.Errorf("--kubeconfig: %w", err))
		}
	}
	if o.proxies.Nice < 0 || o.proxies.Nice > 19 {
		errs = append(errs, fmt.Errorf("--proxy-nice must be from 0 to 19, got %d", o.proxies.Nice))
	}
	errs = append(errs, directoryFlag("--proxy-profiles", o.proxies.Profiles), directoryFlag("--view-profiles", o.nodeView.Profiles))
	if o.nodeproxy != "" {
		if _, err := os.Stat(o.nodeproxy); err != nil {
			errs = append(errs, fmt.Errorf("--nodeproxy: %w", err))
		}
	}
	if o.output != "table" && o.output != "json" {
		errs = append(errs, fmt.Errorf("--output must be table or json, got %s", o.output))
	}
	errs = append(errs, validateChartPath(o.chart))
	return errors.Join(errs...)
}

func newBenchCommand() *cobra.Command {
	o := newBenchOptions()
	long := "Measure nodeproxy on a synthetic cluster of the given shape, in this process (no cluster needed), " +
		"or with --kubeconfig a cluster it fronts, and print a summary. Scenarios (when none is named, those that run in-process; " +
		"with --kubeconfig, those that take it: bulkget, fanout, revoke and apiserver):\n"
	for _, s := range bench.Scenarios {
		long += fmt.Sprintf("  %-10s %s\n", s.Name, s.Help)
	}
	cmd := &cobra.Command{
		Use:   "nodeproxy-bench [scenario...]",
		Short: "Benchmark nodeproxy on a synthetic cluster",
		Long:  long,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.validate(); err != nil {
				return fmt.Errorf("invalid flags: %w", err)
			}
			scenarios, err := bench.Lookup(args, o.kubeconfig != "")
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBench(ctx, o, scenarios, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	return cli.WithFlags(cmd, o.flags())
}

// benchReport is the JSON output.
type benchReport struct {
	// Shape is the generated cluster's; absent when no in-process
	// scenario ran.
	Shape   *workload.Shape `json:"shape,omitempty"`
	Results []*bench.Result `json:"results"`
}

func runBench(ctx context.Context, o *benchOptions, scenarios []bench.Scenario, out, progress io.Writer) error {
	started := time.Now()
	// The in-process scenarios share one generated cluster; those against
	// a cluster build their own workload through kube-apiserver.
	inProcess := func(s bench.Scenario) bool { return o.kubeconfig == "" && s.InProcess() }
	var cluster *workload.Cluster
	if slices.ContainsFunc(scenarios, inProcess) {
		var err error
		if cluster, err = workload.Generate(o.shape); err != nil {
			return err
		}
		fmt.Fprintf(progress, "generated %d nodes, %d pods, %d volumes in %s\n", len(cluster.Nodes), len(cluster.Pods), len(cluster.PVs),
			time.Since(started).Round(time.Millisecond))
	}
	env := &bench.Env{Shape: o.shape, Cluster: cluster, PhaseDuration: o.phaseDuration, Watch: o.watch, RevokeRate: o.revokeRate, Kubelets: o.kubelets, Proxies: o.proxies, Causal: o.causal, Failover: o.failover, NodeView: o.nodeView, Shards: o.shards,
		Progress: progress, Bar: progressBars(progress)}
	// The cluster the scenarios that need one share: the kubeconfig's, or
	// a local control plane started for the first of them.
	stopTarget := func() {}
	defer func() { stopTarget() }()
	connect := sync.OnceValues(func() (bench.Target, error) {
		if o.kubeconfig == "" {
			fmt.Fprintln(progress, "starting etcd, kube-apiserver (Node and RBAC authorizers) and nodeproxy serve")
			t, stop, err := startLocalTarget(ctx, o.nodeproxy, progress)
			if err == nil {
				stopTarget = stop
			}
			return t, err
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
		if err != nil {
			return bench.Target{}, fmt.Errorf("--kubeconfig %s: %w", o.kubeconfig, err)
		}
		return bench.KubeconfigTarget(cfg)
	})
	report := benchReport{}
	if cluster != nil {
		report.Shape = &o.shape
	}
	var runErr error
	for _, s := range scenarios {
		var r *bench.Result
		var err error
		if inProcess(s) {
			r, err = s.Run(ctx, env)
		} else if t, cerr := connect(); cerr != nil {
			err = cerr
		} else {
			r, err = s.RunAgainst(ctx, env, t)
		}
		if r != nil {
			report.Results = append(report.Results, r)
		}
		if err != nil {
			runErr = fmt.Errorf("%s: %w", s.Name, err)
			break
		}
	}
	if o.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return err
		}
	} else if err := writeBenchTable(out, report); err != nil {
		return err
	}
	// The chart too covers what was measured before an interruption.
	chartErr := writeBenchChart(o.chart, report.Results)
	if ctx.Err() != nil {
		return errors.Join(fmt.Errorf("interrupted (%w): the results above are partial", context.Cause(ctx)), chartErr)
	}
	return errors.Join(runErr, chartErr)
}

func writeBenchTable(w io.Writer, r benchReport) error {
	if s := r.Shape; s != nil {
		fmt.Fprintf(w, "cluster: %d nodes x %d pods in %d namespaces\n", s.Nodes, s.PodsPerNode, s.Namespaces)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, res := range r.Results {
		title := res.Scenario
		if res.Partial {
			title += " (partial: interrupted)"
		}
		fmt.Fprintf(tw, "\n%s\t\t\t\t\n", title)
		for _, f := range res.Figures {
			fmt.Fprintf(tw, "  %s\t%s %s\t\t\t\n", f.Name, humanNumber(f.Value), f.Unit)
		}
		if len(res.Latencies) > 0 {
			fmt.Fprintf(tw, "  latency (µs)\tp50\tp99\tmax\tcount\n")
			for _, l := range res.Latencies {
				fmt.Fprintf(tw, "  %s\t%.2f\t%.2f\t%.2f\t%d\n", l.Name, l.P50, l.P99, l.Max, l.Count)
			}
		}
	}
	return tw.Flush()
}

// humanNumber prints large numbers with thousands separators and small
// ones with a few significant digits.
func humanNumber(v float64) string {
	if v >= 1000 {
		return bench.Thousands(v)
	}
	return fmt.Sprintf("%.3g", v)
}

// startLocalTarget starts the control plane of `make demo` (etcd and
// kube-apiserver built from this checkout's hack/tools, Node and RBAC
// authorizers) and hub, or the nodeproxy beside this binary when hub is
// "", as `nodeproxy serve` in front of it.
func startLocalTarget(ctx context.Context, hub string, progress io.Writer) (bench.Target, func(), error) {
	hub, err := hubBinary(hub)
	if err != nil {
		return bench.Target{}, nil, err
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{Log: progress})
	if err != nil {
		return bench.Target{}, nil, fmt.Errorf("start a local control plane (run from a checkout of nodeproxy; make tools builds it): %w", err)
	}
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		cp.Stop()
		return bench.Target{}, nil, err
	}
	np, err := cp.StartNodeproxy(ctx, hub, ports[0])
	if err != nil {
		cp.Stop()
		return bench.Target{}, nil, err
	}
	stop := func() { np.Process.Stop(); cp.Stop() }
	// The node endpoints run from nodeproxy-node beside the hub when
	// there is one, as they would on nodes.
	target, err := bench.LocalTarget(cp, np, controlplane.LeanNodeEndpointCommand(hub))
	if err != nil {
		stop()
		return bench.Target{}, nil, err
	}
	return target, stop, nil
}

// hubBinary is the nodeproxy binary to run as the hub: path when set,
// else the nodeproxy beside this binary. The hub is a binary of its own
// so that this one, not the hub, carries the benchmark's weight.
func hubBinary(path string) (string, error) {
	if path != "" {
		return path, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find this binary, to run the nodeproxy beside it: %w", err)
	}
	hub := filepath.Join(filepath.Dir(self), "nodeproxy")
	if _, err := os.Stat(hub); err != nil {
		return "", fmt.Errorf("no nodeproxy beside this binary to serve in front of the local control plane (make build builds both, or pass --nodeproxy): %w", err)
	}
	return hub, nil
}

// directoryFlag checks that a flag naming a directory to write to, if
// set, names one.
func directoryFlag(flag, dir string) error {
	if dir == "" {
		return nil
	}
	if fi, err := os.Stat(dir); err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("%s %s: not a directory", flag, dir)
	}
	return nil
}
