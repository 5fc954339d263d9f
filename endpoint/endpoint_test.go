package endpoint_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeproxy/nodeproxy/test/testserver"
)

var runs atomic.Int64

// workload makes a namespace where pod p, bound to node, uses secret s and
// configmap c; secret other is used by nobody.
func workload(t *testing.T, node string) string {
	t.Helper()
	ctx := context.Background()
	ns := fmt.Sprintf("endpoint-%d", runs.Add(1))
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	for _, name := range []string{"s", "other"} {
		if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Data:       map[string][]byte{"password": []byte("pw-" + name)},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "c"}, Data: map[string]string{"k": "v"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			AutomountServiceAccountToken: new(false),
			Containers:                   []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
			Volumes: []corev1.Volume{
				{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}},
				{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}}},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// metric reads one series of the endpoint's /metrics, as the node.
func metric(t *testing.T, n *node, series string) string {
	t.Helper()
	c, err := rest.HTTPClientFor(n.kubelet)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(n.kubelet.Host + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			return rest
		}
	}
	return "0"
}

// TestKubeletReadsThroughTheHub drives the endpoint with client-go as the
// kubelet configures it (protobuf first) and as its secret manager reads:
// a reflector per object, selected by name, with streaming lists.
func TestKubeletReadsThroughTheHub(t *testing.T) {
	hub := startHub(t)
	n := startNode(t, "node-a", hub.URL)
	ns := workload(t, "node-a")
	ctx := context.Background()
	kubelet := kubernetes.NewForConfigOrDie(n.kubelet)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())

	// Until the hub's graph has the pod, the secret is refused: wait.
	testserver.Eventually(t, 30*time.Second, "the secret through the endpoint", func(ctx context.Context) error {
		_, err := kubelet.CoreV1().Secrets(ns).Get(ctx, "s", metav1.GetOptions{})
		return err
	})
	if metric(t, n, `nodeproxy_node_requests_total{path="hub",resource="secrets",verb="get"}`) == "0" &&
		metric(t, n, `nodeproxy_node_requests_total{path="copy",resource="secrets",verb="get"}`) == "0" {
		t.Errorf("the get was served neither by the hub nor from the copy of the node's view")
	}

	t.Run("list by name", func(t *testing.T) {
		l, err := kubelet.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=c"})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 1 || l.Items[0].Data["k"] != "v" || l.ResourceVersion == "" {
			t.Fatalf("list: %d items, rv %q", len(l.Items), l.ResourceVersion)
		}
	})

	t.Run("refused as kube-apiserver refuses", func(t *testing.T) {
		_, err := kubelet.CoreV1().Secrets(ns).Get(ctx, "other", metav1.GetOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("get of a secret no pod of the node uses: %v, want 403", err)
		}
	})

	t.Run("reflector with a streaming list sees updates", func(t *testing.T) {
		// The metrics are the process's: other tests (proxy_test.go's)
		// count in them too.
		proxied := counter(t, n, `nodeproxy_node_requests_total{path="apiserver",resource="secrets",verb="watch"}`)
		password := reflect(t, kubelet, ns, "s")
		testserver.Eventually(t, 30*time.Second, "the reflector's initial state", func(context.Context) error {
			if p := password(); p != "pw-s" {
				return fmt.Errorf("password %q", p)
			}
			return nil
		})
		rotate(t, ns, "s", "rotated")
		testserver.Eventually(t, 30*time.Second, "the update in the reflector's store", func(context.Context) error {
			if p := password(); p != "rotated" {
				return fmt.Errorf("password %q", p)
			}
			return nil
		})
		if metric(t, n, `nodeproxy_node_requests_total{path="hub",resource="secrets",verb="watch"}`) == "0" &&
			metric(t, n, `nodeproxy_node_requests_total{path="copy",resource="secrets",verb="watch"}`) == "0" {
			t.Errorf("the watch was served neither by the hub nor from the copy of the node's view")
		}
		if got := counter(t, n, `nodeproxy_node_requests_total{path="apiserver",resource="secrets",verb="watch"}`) - proxied; got != 0 {
			t.Errorf("%v secrets watches went to kube-apiserver", got)
		}
	})

	t.Run("JSON watch ends with 403 when the pod goes", func(t *testing.T) {
		cfg := rest.CopyConfig(n.kubelet)
		cfg.AcceptContentTypes, cfg.ContentType = "application/json", "application/json"
		asJSON := kubernetes.NewForConfigOrDie(cfg)
		l, err := asJSON.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=c"})
		if err != nil {
			t.Fatal(err)
		}
		w, err := asJSON.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{
			FieldSelector: "metadata.name=c", ResourceVersion: l.ResourceVersion, AllowWatchBookmarks: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if err := admin.CoreV1().Pods(ns).Delete(ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		deadline := time.After(30 * time.Second)
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatal("the watch ended without an error")
				}
				if ev.Type != watch.Error {
					continue
				}
				if err := apierrors.FromObject(ev.Object); !apierrors.IsForbidden(err) {
					t.Fatalf("error event %v, want 403", err)
				}
				return
			case <-deadline:
				t.Fatal("no ERROR within 30s of the pod's deletion")
			}
		}
	})
}

// TestOnlyTheNode: the endpoint serves its node's identity and nobody
// else, not even another node.
func TestOnlyTheNode(t *testing.T) {
	n := startNode(t, "node-b", "")
	for _, tc := range []struct {
		name string
		cfg  func() *rest.Config
		code int
	}{
		{"no certificate", func() *rest.Config {
			c := rest.CopyConfig(n.kubelet)
			c.CertFile, c.KeyFile = "", ""
			return c
		}, http.StatusUnauthorized},
		{"another node", func() *rest.Config {
			c, err := cp.NodeConfig("node-c")
			if err != nil {
				t.Fatal(err)
			}
			c.Host, c.CAData = n.kubelet.Host, n.kubelet.CAData
			return c
		}, http.StatusForbidden},
		{"an admin", func() *rest.Config {
			c := cp.AdminConfig()
			c.Host, c.CAData = n.kubelet.Host, n.kubelet.CAData
			return c
		}, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kubernetes.NewForConfigOrDie(tc.cfg()).CoreV1().Nodes().Get(context.Background(), "node-b", metav1.GetOptions{})
			var status apierrors.APIStatus
			if !errorsAs(err, &status) || int(status.Status().Code) != tc.code {
				t.Fatalf("got %v, want %d", err, tc.code)
			}
		})
	}
	t.Run("health is open", func(t *testing.T) {
		c := rest.CopyConfig(n.kubelet)
		c.CertFile, c.KeyFile = "", ""
		hc, err := rest.HTTPClientFor(c)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Get(n.kubelet.Host + "/livez")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/livez: %s", resp.Status)
		}
	})
}

// TestWithoutHub: with no hub (or a hub that never answers) everything
// goes to kube-apiserver, which decides as it always has.
func TestWithoutHub(t *testing.T) {
	dead := "https://127.0.0.1:1" // nothing listens on port 1
	n := startNode(t, "node-d", dead)
	ns := workload(t, "node-d")
	kubelet := kubernetes.NewForConfigOrDie(n.kubelet)
	ctx := context.Background()
	testserver.Eventually(t, 30*time.Second, "the secret through kube-apiserver", func(ctx context.Context) error {
		_, err := kubelet.CoreV1().Secrets(ns).Get(ctx, "s", metav1.GetOptions{})
		return err
	})
	if _, err := kubelet.CoreV1().Secrets(ns).Get(ctx, "other", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("kube-apiserver's Node authorizer should refuse: %v", err)
	}
	// Writes pass through: the kubelet registers its Node.
	if _, err := kubelet.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-d"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the node's Node through the endpoint: %v", err)
	}
	if got := metric(t, n, `nodeproxy_node_hub_fallbacks_total{reason="down"}`); got == "0" {
		t.Errorf("no fallback counted")
	}
	if got := metric(t, n, `nodeproxy_node_requests_total{path="apiserver",resource="nodes",verb="create"}`); got != "1" {
		t.Errorf("node creations proxied: %s, want 1", got)
	}
}

func errorsAs(err error, target *apierrors.APIStatus) bool {
	return err != nil && errors.As(err, target)
}

// reflect runs, until the test ends, a reflector on secret ns/name as
// the kubelet's secret manager runs one (selected by name, streaming
// lists), and returns a reader of the secret's password as the reflector
// last stored it.
func reflect(t *testing.T, kubelet kubernetes.Interface, ns, name string) func() string {
	t.Helper()
	lw := cache.NewListWatchFromClient(kubelet.CoreV1().RESTClient(), "secrets", ns, fields.OneTermEqualSelector("metadata.name", name))
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	r := cache.NewReflectorWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, kubelet), &corev1.Secret{}, store, cache.ReflectorOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.RunWithContext(ctx)
	return func() string {
		obj, ok, _ := store.GetByKey(ns + "/" + name)
		if !ok {
			return ""
		}
		return string(obj.(*corev1.Secret).Data["password"])
	}
}

// rotate sets secret ns/name's password, as an admin.
func rotate(t *testing.T, ns, name, password string) {
	t.Helper()
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	s, err := admin.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data["password"] = []byte(password)
	if _, err := admin.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// eventuallyPassword waits until password() reads want.
func eventuallyPassword(t *testing.T, what string, password func() string, want string) {
	t.Helper()
	testserver.Eventually(t, 60*time.Second, what, func(context.Context) error {
		if p := password(); p != want {
			return fmt.Errorf("password %q, want %q", p, want)
		}
		return nil
	})
}

// TestHubOutage: the hub goes away under a watching kubelet and comes
// back. The kubelet notices nothing but watch restarts: its reads go to
// kube-apiserver in between, and back to the hub when it returns.
func TestHubOutage(t *testing.T) {
	port := freePort(t)
	hub := startHubOn(t, port)
	n := startNode(t, "node-e", hub.URL)
	ns := workload(t, "node-e")
	password := reflect(t, kubernetes.NewForConfigOrDie(n.kubelet), ns, "s")
	eventuallyPassword(t, "the initial state", password, "pw-s")
	testserver.Eventually(t, 30*time.Second, "the watch on the hub", watching(t, n, "hub"))

	hub.Stop(t)
	testserver.Eventually(t, 60*time.Second, "the watch moved to kube-apiserver", watching(t, n, "apiserver"))
	rotate(t, ns, "s", "while the hub is down")
	eventuallyPassword(t, "an update through kube-apiserver", password, "while the hub is down")

	startHubOn(t, port)
	testserver.Eventually(t, 60*time.Second, "the watch back on the hub", watching(t, n, "hub"))
	rotate(t, ns, "s", "after the hub is back")
	eventuallyPassword(t, "an update through the hub", password, "after the hub is back")
	if got := metric(t, n, "nodeproxy_node_watches_returned_to_hub_total"); got == "0" {
		t.Errorf("no proxied watch was returned to the hub")
	}
}

// watching checks that n's endpoint serves one secrets watch through
// path: apiserver, or hub, which counts the endpoint's copy of the node's
// view too (the hub's, on the node).
func watching(t *testing.T, n *node, path string) func(context.Context) error {
	return func(context.Context) error {
		if path == "hub" {
			if got := offAPIServer(t, n, "secrets"); got != 1 {
				return fmt.Errorf("%d secrets watches through the hub or the copy", got)
			}
			return nil
		}
		if got := metric(t, n, `nodeproxy_node_watches{path="`+path+`",resource="secrets"}`); got != "1" {
			return fmt.Errorf("%s secrets watches through %s", got, path)
		}
		return nil
	}
}

// TestHubKilled: the hub, a process, is killed with SIGKILL under a
// watching kubelet (no ERROR, no close frame: the connection just dies),
// then started again on its port.
func TestHubKilled(t *testing.T) {
	ctx := context.Background()
	port := freePort(t)
	hub, err := cp.StartNodeproxy(ctx, bin, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hub.Process.Stop)
	n := startNode(t, "node-f", hub.URL)
	ns := workload(t, "node-f")
	password := reflect(t, kubernetes.NewForConfigOrDie(n.kubelet), ns, "s")
	eventuallyPassword(t, "the initial state", password, "pw-s")
	testserver.Eventually(t, 30*time.Second, "the watch on the hub", watching(t, n, "hub"))

	hub.Process.Kill()
	testserver.Eventually(t, 60*time.Second, "the watch moved to kube-apiserver", watching(t, n, "apiserver"))
	rotate(t, ns, "s", "while the hub is dead")
	eventuallyPassword(t, "an update through kube-apiserver", password, "while the hub is dead")

	again, err := cp.StartNodeproxy(ctx, bin, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(again.Process.Stop)
	testserver.Eventually(t, 60*time.Second, "the watch back on the hub", watching(t, n, "hub"))
	rotate(t, ns, "s", "after the hub is back")
	eventuallyPassword(t, "an update through the hub", password, "after the hub is back")
}

// TestKubeletCertificateRotation: the kubelet's certificate, which the
// endpoint presents upstream, is rotated and the old one expires. The
// kubelet's watch keeps receiving updates, and with no restart the
// endpoint's new connections carry the new certificate: to kube-apiserver
// (client-go closes the connections made with the old one when it sees
// the file change), and to a hub restarted meanwhile, which refuses an
// expired certificate.
func TestKubeletCertificateRotation(t *testing.T) {
	port := freePort(t)
	hub := startHubOn(t, port)
	const validity = 20 * time.Second
	old, err := cp.ClientCA.ShortLivedClientCert("system:node:node-r", []string{"system:nodes"}, validity)
	if err != nil {
		t.Fatal(err)
	}
	expires := time.Now().Add(validity)
	n := startNodeWith(t, "node-r", nodeSpec{hub: hub.URL, kubelet: old})
	ns := workload(t, "node-r")
	kubelet := kubernetes.NewForConfigOrDie(n.kubelet)
	ctx := context.Background()
	password := reflect(t, kubelet, ns, "s")
	eventuallyPassword(t, "the initial state", password, "pw-s")

	rotated, err := cp.ClientCA.ClientCert("system:node:node-r", []string{"system:nodes"}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	n.writeCert(t, rotated)
	// Waiting on the clock is the point: the old certificate must be past
	// its NotAfter before anything dials again.
	time.Sleep(time.Until(expires) + time.Second)
	// The kubelet's own client rotated too, and watched again.
	rotate(t, ns, "s", "after the rotation")
	eventuallyPassword(t, "an update after the rotation", password, "after the rotation")

	// kube-apiserver: the kubelet registers its Node through the endpoint.
	if _, err := kubelet.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-r"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a request to kube-apiserver after the old certificate expired: %v", err)
	}
	t.Cleanup(func() {
		_ = kubernetes.NewForConfigOrDie(cp.AdminConfig()).CoreV1().Nodes().Delete(context.Background(), "node-r", metav1.DeleteOptions{})
	})

	// The hub: restarted, it is dialed again, with the new certificate.
	hub.Stop(t)
	testserver.Eventually(t, 30*time.Second, "the hub connection gone", func(context.Context) error {
		if got := metric(t, n, "nodeproxy_node_hub_connected"); got != "0" {
			return fmt.Errorf("hub_connected %s", got)
		}
		return nil
	})
	startHubOn(t, port)
	testserver.Eventually(t, 60*time.Second, "the hub dialed again", func(context.Context) error {
		if got := metric(t, n, "nodeproxy_node_hub_connected"); got != "1" {
			return fmt.Errorf("hub_connected %s", got)
		}
		return nil
	})
	rotate(t, ns, "s", "through the hub again")
	eventuallyPassword(t, "an update through the hub", password, "through the hub again")
}

// TestStreamingListFromAResourceVersion: client-go's reflector, when a
// streaming list fails, tries again with the last resourceVersion it
// has (sendInitialEvents=true, resourceVersionMatch=NotOlderThan,
// resourceVersion=X). As from kube-apiserver, the state comes first and
// then the initial-events-end bookmark, which the reflector waits for.
func TestStreamingListFromAResourceVersion(t *testing.T) {
	hub := startHub(t)
	n := startNode(t, "node-w", hub.URL)
	ns := workload(t, "node-w")
	kubelet := kubernetes.NewForConfigOrDie(n.kubelet)
	var rv string
	testserver.Eventually(t, 30*time.Second, "a list through the hub", func(ctx context.Context) error {
		l, err := kubelet.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=s"})
		if err == nil {
			rv = l.ResourceVersion
		}
		return err
	})
	sendInitial := true
	w, err := kubelet.CoreV1().Secrets(ns).Watch(context.Background(), metav1.ListOptions{
		FieldSelector: "metadata.name=s", ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		SendInitialEvents: &sendInitial, AllowWatchBookmarks: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []string
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended after %v", got)
			}
			s, _ := ev.Object.(*corev1.Secret)
			if s == nil {
				t.Fatalf("event %s of %T after %v", ev.Type, ev.Object, got)
			}
			got = append(got, string(ev.Type)+" "+s.Name)
			if ev.Type == watch.Bookmark && s.Annotations[metav1.InitialEventsAnnotationKey] == "true" {
				if len(got) != 2 || got[0] != "ADDED s" {
					t.Errorf("events %v, want the secret ADDED, then the bookmark", got)
				}
				return
			}
		case <-deadline:
			t.Fatalf("no initial-events-end bookmark within 30s; events: %v", got)
		}
	}
}
