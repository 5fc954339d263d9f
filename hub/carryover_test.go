package hub_test

import (
	"context"
	"encoding/json"
	"strconv"
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

// TestRelistAfterKubeAPIServerRestartCostsNodesNothing: a node holds a
// bulk watch channel on its secret while kube-apiserver is killed and
// started again until the hub's secrets reflector has had to relist (a
// restarted kube-apiserver answers a resumed watch 410 Expired when its
// new watch cache starts after the reflector's version). Each update
// written after a restart must arrive on the same channel as MODIFIED,
// and the channel must never get ERROR (before, every relist closed every
// channel of the type with 410, and each node relisted).
func TestRelistAfterKubeAPIServerRestartCostsNodesNothing(t *testing.T) {
	ctx := context.Background()
	testserver.InstallRBAC(t, cp)
	srv := testserver.Start(t, cp, testserver.Options{})
	srv.WaitReady(t, 90*time.Second)
	secret := nodeReadsSecret(t, srv, "carryover")
	secret.waitFor(t, "0", 30*time.Second)
	c := dialAsNode(t, srv, "node-carryover")
	ch, err := c.Watch(ctx, v1alpha1.GetOperation{
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "secrets"}, Namespace: "carryover",
		Options: metav1.ListOptions{FieldSelector: "metadata.name=s"},
	})
	if err != nil {
		t.Fatal(err)
	}

	carried := testserver.Gathered(t, "nodeproxy_cache_relists_carried_over_total", map[string]string{"resource": "secrets"})
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	for i := 1; i <= 6; i++ {
		// A write of another type moves etcd's revision past the hub's
		// secrets: the restarted kube-apiserver's watch cache then
		// starts after the reflector's version, and answers its resumed
		// watch 410 (without it, nothing else may have been written since
		// the last update, and the watch resumes where it was).
		if _, err := admin.CoreV1().ConfigMaps("carryover").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "bump-"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cp.APIServer().Kill()
		if err := cp.RestartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		v := strconv.Itoa(i)
		secret.update(t, v)
		waitForUpdate(t, ch, v)
		if testserver.Gathered(t, "nodeproxy_cache_relists_carried_over_total", map[string]string{"resource": "secrets"}) > carried {
			t.Logf("restart %d: the secrets reflector relisted; the channel carried on", i)
			return
		}
		t.Logf("restart %d: the secrets watch resumed without a relist; restarting again", i)
	}
	t.Fatal("six kube-apiserver restarts and the secrets reflector never relisted: nothing was tested")
}

// dialAsNode opens a bulk watch connection to the hub, directly over
// mTLS, as node, closed when the test ends.
func dialAsNode(t testing.TB, srv *testserver.Server, node string) *watchmux.Client {
	t.Helper()
	cfg, err := cp.NodeConfig(node)
	if err != nil {
		t.Fatal(err)
	}
	return dialAs(t, srv, cfg)
}

// dialAs opens a bulk watch connection to the hub, directly over mTLS,
// with cfg's client certificate, closed when the test ends.
func dialAs(t testing.TB, srv *testserver.Server, cfg *rest.Config) *watchmux.Client {
	t.Helper()
	c, err := watchmux.Dial(context.Background(), &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{
		CertData: cfg.CertData, KeyData: cfg.KeyData, CAFile: cp.ServingCA.CertPath,
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitForUpdate reads ch until a MODIFIED with data v=v, failing on ERROR.
func waitForUpdate(t *testing.T, ch *watchmux.Channel, v string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-ch.Events:
			if !ok {
				t.Fatal("the channel closed")
			}
			if ev.Type == watch.Error {
				t.Fatalf("the channel got ERROR %+v after a kube-apiserver restart", ev.Status)
			}
			var s corev1.Secret
			if ev.Type == watch.Modified && json.Unmarshal(ev.Object, &s) == nil && string(s.Data["v"]) == v {
				return
			}
		case <-timeout:
			t.Fatalf("no MODIFIED with v=%s on the channel within 30 s", v)
		}
	}
}
