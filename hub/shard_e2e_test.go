package hub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// clientOf is cfg's credential for the replicas at address host:
// through the replicas' dialer, verified against the hub's CA.
func clientOf(sh *testserver.Sharded, cfg *rest.Config, host string) *rest.Config {
	return &rest.Config{Host: "https://" + host + ":443", Dial: sh.Dial, TLSClientConfig: rest.TLSClientConfig{
		CertData: cfg.CertData, KeyData: cfg.KeyData, CAFile: cp.ServingCA.CertPath,
	}}
}

// hostOf is the host of server, an address.
func hostOf(t *testing.T, server string) string {
	t.Helper()
	u, err := url.Parse(server)
	if err != nil {
		t.Fatal(err)
	}
	return u.Hostname()
}

// TestANodeIsServedByTheReplicaThatOwnsIt: replicas hub-a and hub-b
// share the nodes. A node that dials the Service and lands on hub-a
// while hub-b owns it is redirected there, for its bulk watch and its
// bulk gets, and reads its pods at hub-b; kube-proxy's kind of caller,
// not a node, is served where it lands. When hub-b's endpoint turns not
// ready, hub-a owns every node: hub-b ends the node's connection, the
// node's session dials the Service again and is served by hub-a, and its
// channel resumes from its last resourceVersion, every pod's ADDED
// exactly once, in order, none lost across the move.
func TestANodeIsServedByTheReplicaThatOwnsIt(t *testing.T) {
	ctx := context.Background()
	const ns = "shard-route"
	p := testserver.StartSharded(t, cp, ns, "hub-a", "hub-b")
	node := testserver.NodeOwnedBy("node-shard-", "hub-b", "hub-a", "hub-b")
	nodeCfg, err := cp.NodeConfig(node)
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	pods, err := admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}

	redirected := func(kind string) float64 {
		return testserver.Gathered(t, "nodeproxy_hub_shard_routing_total", map[string]string{"kind": kind, "decision": "redirected"})
	}
	getsBefore, watchesBefore := redirected("get"), redirected("watch")
	moved := func() float64 {
		return testserver.Gathered(t, "nodeproxy_hub_shard_routing_total", map[string]string{"kind": "watch", "decision": "moved"})
	}
	movedBefore := moved()
	session, err := watchmux.NewSession(ctx, clientOf(p, nodeCfg, p.ServiceHost()))
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	if got, want := hostOf(t, session.Server()), p.Host("hub-b"); got != want {
		t.Fatalf("the node's connection is to %s, want hub-b's stable name %s", got, want)
	}
	if got := redirected("watch") - watchesBefore; got != 1 {
		t.Fatalf("%v bulk watch upgrades redirected, want the node's one", got)
	}
	ch, err := session.Watch(ctx, v1alpha1.GetOperation{
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Options:  metav1.ListOptions{FieldSelector: "spec.nodeName=" + node, ResourceVersion: pods.ResourceVersion},
	})
	if err != nil {
		t.Fatal(err)
	}

	// A bulk get at the Service follows the redirect as client-go's
	// requests follow any: the same credential, at the owner.
	httpClient, err := rest.HTTPClientFor(clientOf(p, nodeCfg, p.ServiceHost()))
	if err != nil {
		t.Fatal(err)
	}
	getPods := func() {
		t.Helper()
		body, _ := json.Marshal(&v1alpha1.BulkGetOperation{
			TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "BulkGetOperation"},
			Spec: v1alpha1.BulkGetOperationSpec{Operations: []v1alpha1.GetOperation{{
				Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
				Options:  metav1.ListOptions{FieldSelector: "spec.nodeName=" + node},
			}}},
		})
		resp, err := httpClient.Post(p.ServiceURL()+watchmux.Path, "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("the node's bulk get: %s", resp.Status)
		}
	}
	getPods()
	if got := redirected("get") - getsBefore; got != 1 {
		t.Fatalf("%v bulk gets redirected, want the node's one", got)
	}

	// kube-proxy's kind of caller: never redirected.
	other, err := watchmux.Dial(ctx, clientOf(p, cp.AdminConfig(), p.ServiceHost()))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := hostOf(t, other.Server()), p.ServiceHost(); got != want {
		t.Errorf("a caller that is not a node went to %s, want where it dialed, %s", got, want)
	}
	other.Close()

	var want []string
	create := func() {
		t.Helper()
		name := "p" + strconv.Itoa(len(want))
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: new(false),
				Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		want = append(want, name)
	}
	var got []string
	readUntil := func(n int) {
		t.Helper()
		timeout := time.After(60 * time.Second)
		for len(got) < n {
			select {
			case ev, ok := <-ch.Events:
				if !ok {
					t.Fatalf("the channel closed after %v", got)
				}
				if ev.Type == watch.Error {
					t.Fatalf("ERROR %+v after %v", ev.Status, got)
				}
				var pod corev1.Pod
				if err := json.Unmarshal(ev.Object, &pod); err != nil {
					t.Fatal(err)
				}
				if ev.Type == watch.Added {
					got = append(got, pod.Name)
				}
			case <-timeout:
				t.Fatalf("pods seen %v, want %v", got, want)
			}
		}
	}
	create()
	readUntil(1)

	p.SetReady(t, "hub-b", false)
	create() // while the node moves
	testserver.Eventually(t, 60*time.Second, "the node's connection moves to hub-a", func(context.Context) error {
		if s := session.Server(); s == "" || hostOf(t, s) != p.ServiceHost() {
			return fmt.Errorf("connected to %q", s)
		}
		return nil
	})
	if got := moved() - movedBefore; got != 1 {
		t.Errorf("%v connections ended for a move, want the node's one at hub-b", got)
	}
	create()
	readUntil(3)
	getsBefore = redirected("get")
	getPods() // at hub-a, which owns the node now: no redirect
	if got := redirected("get") - getsBefore; got != 0 {
		t.Errorf("%v bulk gets redirected after the move, want none", got)
	}
	select {
	case ev := <-ch.Events:
		t.Fatalf("an event after every pod's: %s %s", ev.Type, ev.Object)
	case <-time.After(500 * time.Millisecond):
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("pods seen %v, want each of %v once, in order", got, want)
	}
}
