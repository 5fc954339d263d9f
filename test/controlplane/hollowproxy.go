package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// proxySyncTimeout bounds the wait for a hollow proxy's three informers to
// sync. Against an idle kube-apiserver that takes well under a second; a
// loaded two-core machine running other test packages stretches it, as it
// does a hollow kubelet's Ready (nodeReadyTimeout).
const proxySyncTimeout = 2 * time.Minute

// proxyVerbosity is the -v a hollow proxy runs at: pkg/proxy/config
// (v1.36.3) logs each handler call at V(4) ("Calling handler.OnServiceAdd"
// and the like) and each informer's first full sync at V(3), which is what
// ProxyLog records. Nothing at V(4) in a hollow proxy logs per request or
// per object beyond those lines and a few reflector lines per watch, so
// the log stays small; client-go's per-request lines start at V(6).
const proxyVerbosity = 4

// HollowProxy is one kubemark --morph=proxy process: kube-proxy's own
// server code (cmd/kube-proxy/app.ProxyServer.Run) with a proxier whose
// handlers do nothing (pkg/proxy/kubemark.FakeProxier). It opens the
// watches a kube-proxy opens, through the same informers, label and field
// selectors and WatchList requests: Services (not headless, not claimed by
// another proxy through service.kubernetes.io/service-proxy-name),
// EndpointSlices (not labelled service.kubernetes.io/headless) and
// ServiceCIDRs; it does not watch Nodes, and serves no healthz or
// metrics. It writes an Event ("Starting") at start.
//
// Log holds what it reported receiving; see ProxyLog for what its log can
// and cannot say.
type HollowProxy struct {
	// Name is the node the proxy stands for (--name); it appears only in
	// its Event, not in how it authenticates.
	Name string
	// Kubeconfig is the file it reaches the API with.
	Kubeconfig string
	// Process is the kubemark process; its whole output is in LogPath.
	Process *Process
	// LogPath is the proxy's log file, in HollowProxyOptions.Dir.
	LogPath string
	// Log is the proxy's output parsed as it arrives.
	Log *ProxyLog
}

// HollowProxyOptions choose how a hollow proxy runs.
type HollowProxyOptions struct {
	// Name is the node's name.
	Name string
	// Kubeconfig is what the proxy reaches the API with, used as it is:
	// see ControlPlane.KubeProxyKubeconfig.
	Kubeconfig string
	// Dir receives the log. It is created if missing.
	Dir string
	// ExtraArgs are appended to kubemark's command line, after
	// -v=proxyVerbosity (a later -v wins; below 4 ProxyLog sees no
	// handler calls).
	ExtraArgs []string
}

// StartHollowProxy starts bin (kubemark, see EnsureTools) as the kube-proxy
// of opts.Name. It returns once the process runs, without waiting for its
// informers: see WaitSynced (a proxy whose credentials are refused never
// syncs, and a test of that wants the process anyway). The caller stops
// it.
func StartHollowProxy(bin string, opts HollowProxyOptions) (*HollowProxy, error) {
	if opts.Name == "" || opts.Kubeconfig == "" || opts.Dir == "" {
		return nil, errors.New("hollow proxy: Name, Kubeconfig and Dir are required")
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("hollow proxy %s directory: %w", opts.Name, err)
	}
	p := &HollowProxy{
		Name:       opts.Name,
		Kubeconfig: opts.Kubeconfig,
		LogPath:    filepath.Join(opts.Dir, "proxy-"+opts.Name+".log"),
		Log:        NewProxyLog(),
	}
	args := append([]string{
		"--morph=proxy",
		"--name=" + opts.Name,
		"--kubeconfig=" + opts.Kubeconfig,
		fmt.Sprintf("-v=%d", proxyVerbosity),
	}, opts.ExtraArgs...)
	var err error
	if p.Process, err = StartProcessTee("hollow proxy "+opts.Name, bin, args, p.LogPath, p.Log); err != nil {
		return nil, err
	}
	return p, nil
}

// WaitSynced waits until the proxy's three informers have synced, which
// it logs at V(0) once each ("Caches are synced"); from then on it has
// every watch open and has delivered the initial state to its handlers.
// It gives up after proxySyncTimeout, or at once if the process exits;
// the error has the tail of its log.
func (p *HollowProxy) WaitSynced(ctx context.Context) error {
	err := p.wait(ctx, proxySyncTimeout, func() error {
		var missing []string
		for _, k := range ProxyKinds {
			if !p.Log.Synced(k) {
				missing = append(missing, string(k))
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("not synced: %s", strings.Join(missing, ", "))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("hollow proxy %s: %w", p.Name, err)
	}
	return nil
}

// wait polls check until it returns nil, timeout passes or the process
// exits; the error has check's last error and the tail of the log.
func (p *HollowProxy) wait(ctx context.Context, timeout time.Duration, check func() error) error {
	last := errors.New("not checked yet")
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if done, err := p.Process.Exited(); done {
			return false, fmt.Errorf("exited (%v)", err)
		}
		last = check()
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last: %v); %s", err, last, p.Process.Describe())
	}
	return nil
}

// Stop ends the proxy. It leaves nothing behind but its log and the
// Event it wrote. It is safe to call more than once.
func (p *HollowProxy) Stop() {
	if p.Process != nil {
		p.Process.Stop()
	}
}
