package endpoint_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/endpoint"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// TestEndpointRefusesTheClusterCAForTheHub: the endpoint does not start
// without a CA for the hub, nor with one that is a CA of the cluster
// (kube-apiserver's, or the client CA): on kubeadm clusters the cluster
// CA signs kubelet serving certificates for names a node chooses.
func TestEndpointRefusesTheClusterCAForTheHub(t *testing.T) {
	dir := t.TempDir()
	kp, err := cp.ClientCA.ClientCert("system:node:node-flags", []string{"system:nodes"}, dir, "kubelet")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubelet-direct.conf")
	if err := controlplane.WriteKubeconfig(&rest.Config{Host: cp.URL, TLSClientConfig: rest.TLSClientConfig{
		CAFile: cp.ServingCA.CertPath, CertFile: kp.CertPath, KeyFile: kp.KeyPath}}, kubeconfig); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, hubCA, want string
	}{
		{"no CA for the hub", "", "--hub-ca-file is required"},
		{"the CA kube-apiserver is verified by", cp.ServingCA.CertPath, "is also --kubeconfig's CA"},
		{"the client CA", cp.ClientCA.CertPath, "is also --client-ca-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := endpoint.NewOptions()
			o.NodeName, o.Kubeconfig, o.ClientCAFile, o.CertDir = "node-flags", kubeconfig, cp.ClientCA.CertPath, t.TempDir()
			o.HubURL, o.HubCAFile = "https://nodeproxy.nodeproxy.svc:443", tc.hubCA
			err := o.Validate()
			if err == nil {
				_, _, err = o.Config()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestNodeCannotPoseAsTheHub: a node holds a kubelet serving certificate
// from the cluster's CA for the address the endpoint dials (what a
// kubelet-serving CSR gets it on kubeadm). An endpoint configured as
// `nodeproxy node` is, with the hub's own CA, does not talk to it: the
// handshake fails, the impostor sees no request, and the kubelet's reads
// go to kube-apiserver. The same flags with the real hub's address read
// through the hub.
func TestNodeCannotPoseAsTheHub(t *testing.T) {
	hubCA, err := controlplane.NewCA(t.TempDir(), "hub")
	if err != nil {
		t.Fatal(err)
	}
	testserver.InstallRBAC(t, cp, "rbac-webhook.yaml", "rbac-bulk.yaml")
	hub := testserver.Start(t, cp, testserver.Options{ServingCA: hubCA})
	hub.WaitReady(t, 90*time.Second)

	const name = "node-posed"
	kp, err := cp.ClientCA.ClientCert("system:node:"+name, []string{"system:nodes"}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	impostorCert, err := cp.ServingCA.KubeletServingCert("impostor", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	var reached atomic.Int64
	impostor := inBetweenAs(t, impostorCert, hub.URL, hub.CA, kp, func(http.ResponseWriter, *http.Request) bool {
		reached.Add(1)
		return false // and relays the real hub: only the certificate differs
	})
	ns := workload(t, name)
	counter := func(n *node, series string) float64 {
		t.Helper()
		v, err := strconv.ParseFloat(metric(t, n, series), 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	read := func(n *node) {
		t.Helper()
		testserver.Eventually(t, 30*time.Second, "the secret through "+n.name+"'s endpoint", func(ctx context.Context) error {
			_, err := kubernetes.NewForConfigOrDie(n.kubelet).CoreV1().Secrets(ns).Get(ctx, "s", metav1.GetOptions{})
			return err
		})
	}

	posed := startNodeWith(t, name, nodeSpec{hub: impostor, kubelet: kp, hubCAFile: hubCA.CertPath})
	// Served from the hub: through a bulk get, or from the node's copy of
	// its view, which only the hub's connection fills.
	viaHubOf := func(n *node) float64 {
		t.Helper()
		return counter(n, `nodeproxy_node_requests_total{path="hub",resource="secrets",verb="get"}`) +
			counter(n, `nodeproxy_node_requests_total{path="copy",resource="secrets",verb="get"}`)
	}
	before := viaHubOf(posed)
	// Several dials of the hub happen meanwhile (from 0.5 s): each
	// reaches the impostor's handshake, none its handler.
	for range 3 {
		read(posed)
		time.Sleep(time.Second)
	}
	if got := reached.Load(); got != 0 {
		t.Fatalf("the endpoint sent %d requests to a node posing as the hub with the cluster CA's certificate", got)
	}
	if viaHubOf(posed) != before {
		t.Fatal("a read was served through the impostor")
	}

	direct := startNodeWith(t, name, nodeSpec{hub: hub.URL, kubelet: kp, hubCAFile: hubCA.CertPath})
	testserver.Eventually(t, 60*time.Second, "a read through the hub of its own CA", func(ctx context.Context) error {
		b := viaHubOf(direct)
		read(direct)
		if viaHubOf(direct) == b {
			return errors.New("not served by the hub yet")
		}
		return nil
	})
}
