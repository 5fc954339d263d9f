package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodeproxy/nodeproxy/test/bench"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// outage stops kube-apiserver and the hub (etcd stays, as a control
// plane's storage outlives its API servers), restarts node-a's kubelet
// meanwhile, brings both back, and shows every node caught up.
func (d *demo) outage(ctx context.Context) error {
	d.step("An outage: kube-apiserver and the hub stopped (etcd kept)")
	a, c := d.nodes[0], d.nodes[2]
	before, err := d.sumEndpoints(ctx, "nodeproxy_node_copy_reads_total", "mode", "offline")
	if err != nil {
		return err
	}
	cut := time.Now()
	d.cp.APIServer().Stop()
	d.hub.Process.Stop()
	if err := d.waitEndpoints(ctx, func(m bench.Metrics) bool { return m.Sum("nodeproxy_node_offline_since_seconds") != 0 }); err != nil {
		return fmt.Errorf("endpoints not offline: %w", err)
	}
	d.say("every endpoint offline %.1f s later; the pods keep running", time.Since(cut).Seconds())

	restarted := time.Now()
	a.Kubelet.Stop()
	h, err := controlplane.StartHollowKubelet(ctx, d.tools["kubemark"], controlplane.HollowKubeletOptions{
		Name: a.Name, Kubeconfig: a.Endpoint.KubeletKubeconfig, Dir: filepath.Dir(a.Kubelet.LogPath)})
	if err != nil {
		return err
	}
	a.Kubelet = h
	if err := d.waitRunning(ctx, []*tourNode{a}, map[string]string{"password": "rotated", "mode": "v1"}); err != nil {
		return fmt.Errorf("node-a's kubelet restarted offline: %w", err)
	}
	after, err := d.sumEndpoints(ctx, "nodeproxy_node_copy_reads_total", "mode", "offline")
	if err != nil {
		return err
	}
	d.say("node-a's kubelet restarted, its root directory new: web-0 Running with its files %.1f s later, from node-a's copy", time.Since(restarted).Seconds())
	d.say("(%.0f reads answered from the copies while offline)", after-before)

	back := time.Now()
	outage := back.Sub(cut)
	if err := d.cp.RestartAPIServer(ctx); err != nil {
		return err
	}
	apiReady := time.Since(back)
	hub, err := d.hub.StartReplica(ctx, d.hub.Port, "nodeproxy")
	if err != nil {
		return fmt.Errorf("start the hub again: %w", err)
	}
	// The demo stops this one now, and measures it.
	d.hub.Process = hub.Process
	d.say("kube-apiserver and the hub started again after %.0f s: ready %.1f s and %.1f s later", outage.Seconds(), apiReady.Seconds(), time.Since(back).Seconds())

	ready := time.Now()
	if err := d.waitEndpoints(ctx, func(m bench.Metrics) bool {
		return m.Sum("nodeproxy_node_offline_since_seconds") == 0 && m.Sum("nodeproxy_node_hub_connected") == 1
	}); err != nil {
		return fmt.Errorf("endpoints not following the hub again: %w", err)
	}
	d.say("every endpoint following the hub again %.1f s after both were ready", time.Since(ready).Seconds())

	// The admin client's connection died with kube-apiserver; its first
	// request may fail while it dials again.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := d.admin.CoreV1().Namespaces().Get(ctx, demoNamespace, metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("reach kube-apiserver once back: %w", err)
	}
	updated := time.Now()
	if err := d.setData(ctx, dbPassword, "after the outage"); err != nil {
		return err
	}
	if err := d.setData(ctx, batchConfig, "v2"); err != nil {
		return err
	}
	if err := d.waitCurrent(ctx, a, dbPassword); err != nil {
		return err
	}
	if err := d.waitCurrent(ctx, c, batchConfig); err != nil {
		return err
	}
	current := time.Since(updated)
	var proxies []*controlplane.HollowProxy
	for _, n := range d.nodes {
		proxies = append(proxies, n.Proxy)
	}
	if err := d.cp.WaitHollowProxiesCaughtUp(ctx, proxies, demoNamespace); err != nil {
		return err
	}
	d.say("db-password and batch-config changed: node-a's and node-c's copies hold kube-apiserver's versions %.1f s later,", current.Seconds())
	d.say("and every kube-proxy has seen an EndpointSlice created and deleted after them %.1f s later", time.Since(updated).Seconds())
	if err := waitFile(ctx, a.file(dbPassword), "after the outage"); err != nil {
		return err
	}
	if err := waitFile(ctx, c.file(batchConfig), "v2"); err != nil {
		return err
	}
	d.say("web-0's and batch-0's files hold the new values %.1f s after the change", time.Since(updated).Seconds())
	return nil
}

// waitCurrent waits until n's copy holds m's object at kube-apiserver's
// version: a read at resourceVersion "0" through n's endpoint, which its
// copy answers as it is.
func (d *demo) waitCurrent(ctx context.Context, n *tourNode, m mount) error {
	var want, got string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var meta metav1.Object
		if m.secret {
			s, err := d.admin.CoreV1().Secrets(demoNamespace).Get(ctx, m.name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			want = s.ResourceVersion
			if meta, err = n.asKubelet.CoreV1().Secrets(demoNamespace).Get(ctx, m.name, metav1.GetOptions{ResourceVersion: "0"}); err != nil {
				return false, nil
			}
		} else {
			cm, err := d.admin.CoreV1().ConfigMaps(demoNamespace).Get(ctx, m.name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			want = cm.ResourceVersion
			if meta, err = n.asKubelet.CoreV1().ConfigMaps(demoNamespace).Get(ctx, m.name, metav1.GetOptions{ResourceVersion: "0"}); err != nil {
				return false, nil
			}
		}
		got = meta.GetResourceVersion()
		return got == want, nil
	})
	if err != nil {
		return fmt.Errorf("%s's copy holds %s at resourceVersion %q, kube-apiserver's %q: %w", n.Name, m.name, got, want, err)
	}
	return nil
}

// waitEndpoints waits, at most a minute, until every node endpoint's
// /metrics satisfies ok.
func (d *demo) waitEndpoints(ctx context.Context, ok func(bench.Metrics) bool) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, n := range d.nodes {
			m, err := bench.Scrape(ctx, n.scrape, n.Endpoint.URL+"/metrics")
			if err != nil || !ok(m) {
				return false, nil
			}
		}
		return true, nil
	})
}

// sumEndpoints sums a family over every node endpoint's /metrics.
func (d *demo) sumEndpoints(ctx context.Context, name string, match ...string) (float64, error) {
	var sum float64
	for _, n := range d.nodes {
		m, err := bench.Scrape(ctx, n.scrape, n.Endpoint.URL+"/metrics")
		if err != nil {
			return 0, err
		}
		sum += m.Sum(name, match...)
	}
	return sum, nil
}
