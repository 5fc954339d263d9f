package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/bench"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// demo is what the steps share.
type demo struct {
	out io.Writer
	o   demoOptions
	// began is when the demo started; each step says how long after.
	began time.Time
	// root is the checkout's top directory, where manifests/ is.
	root   string
	cp     *controlplane.ControlPlane
	hub    *controlplane.Nodeproxy
	admin  kubernetes.Interface
	target bench.Target
	tools  map[string]string
	// dir holds the nodes' files: credentials, kubeconfigs, logs, copies.
	dir   string
	nodes []*tourNode
}

func run(ctx context.Context, out io.Writer, o demoOptions) (err error) {
	d := &demo{out: out, o: o, began: time.Now()}
	fmt.Fprintln(out, "nodeproxy's demo: a local control plane, three nodes behind node endpoints, an outage, the Pod API, and the same")
	fmt.Fprintln(out, "kubelets straight on kube-apiserver and behind endpoints side by side. Ctrl-C stops it at any step; it leaves")
	fmt.Fprintln(out, "nothing running.")
	if d.root, err = controlplane.RepoRoot(); err != nil {
		return err
	}
	if d.dir, err = os.MkdirTemp("", "nodeproxy-demo-"); err != nil {
		return err
	}
	defer os.RemoveAll(d.dir)

	d.step("A local control plane: etcd, kube-apiserver (Node and RBAC authorizers), the hub (nodeproxy serve) in front of it")
	tools := []string{"kubemark"}
	if o.podAPI {
		tools = append(tools, "hollowkubelet")
	}
	if d.tools, err = controlplane.EnsureTools(ctx, prefixed("    ", out), tools...); err != nil {
		return err
	}
	if d.cp, err = controlplane.Start(ctx, controlplane.Options{Log: prefixed("    ", out)}); err != nil {
		return err
	}
	defer func() {
		d.step("Stopping the nodes, the hub, kube-apiserver and etcd")
		for _, n := range d.nodes {
			n.Stop()
		}
		if d.hub != nil {
			d.hub.Process.Stop()
		}
		d.cp.Stop()
	}()
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		return err
	}
	if d.hub, err = d.cp.StartNodeproxy(ctx, o.nodeproxy, ports[0]); err != nil {
		return err
	}
	if err := d.cp.RegisterAPIService(ctx, filepath.Join(d.root, "manifests", "base", "apiservice.yaml"), ports[0]); err != nil {
		return err
	}
	d.say("the hub at %s, also serving bulk.k8s.io/v1alpha1 through kube-apiserver's aggregator", d.hub.URL)
	if d.admin, err = kubernetes.NewForConfig(d.cp.AdminConfig()); err != nil {
		return err
	}
	if d.target, err = bench.LocalTarget(d.cp, d.hub, controlplane.LeanNodeEndpointCommand(o.nodeproxy)); err != nil {
		return err
	}

	if err := d.tour(ctx); err != nil {
		return err
	}
	if err := d.outage(ctx); err != nil {
		return err
	}
	if o.podAPI {
		d.step("The Pod API: a pod posted on a node with no API server, handed over once there is one (--pod-api=false skips it)")
		if err := d.showPodAPI(ctx); err != nil {
			return err
		}
	}
	if o.compare {
		if err := d.compare(ctx); err != nil {
			return err
		}
	}
	d.lookAround()
	switch {
	case o.exit:
		return nil
	case o.duration > 0:
		d.say("Stopping by itself in %s.", o.duration)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(o.duration):
			return nil
		}
	default:
		d.say("Press Ctrl-C to stop.")
		<-ctx.Done()
		return ctx.Err()
	}
}

// lookAround prints where things are and a few commands to try.
func (d *demo) lookAround() {
	files := d.hub.Files
	d.step("Look around (the files go when the demo stops)")
	a := d.nodes[0]
	pem := filepath.Join(filepath.Dir(a.Endpoint.KubeletKubeconfig), "kubelet-client-current.pem")
	fmt.Fprintf(d.out, `    kubectl --kubeconfig %[1]s get pods,nodes -A -o wide
    kubectl --kubeconfig %[1]s create -o yaml -f docs/examples/bulkget.yaml
    curl -s --cacert %[2]s --cert %[3]s --key %[4]s %[5]s/metrics | grep ^nodeproxy_
    curl -s --cacert %[6]s --cert %[7]s --key %[7]s %[8]s/metrics | grep ^nodeproxy_node_    # node-a's endpoint
    logs: %[9]s (etcd, kube-apiserver, the hub), %[10]s (each node's kubelet, kube-proxy and endpoint)
`, files.AdminKubeconfig, files.CA, files.AdminCert, files.AdminKey, d.hub.URL,
		d.cp.ServingCA.CertPath, pem, a.Endpoint.URL, d.cp.Dir, d.dir)
}
