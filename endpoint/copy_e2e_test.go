package endpoint_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeproxy/nodeproxy/test/forwarder"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// hostPort is u's host:port.
func hostPort(t *testing.T, u string) string {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return parsed.Host
}

// outage puts forwarders in front of kube-apiserver and the hub for one
// node, so that a test can take both away from it and give them back.
type outage struct {
	api, hub               *forwarder.Forwarder
	apiBackend, hubBackend string
}

func newOutage(t *testing.T, hubURL string) *outage {
	t.Helper()
	o := &outage{apiBackend: hostPort(t, cp.URL), hubBackend: hostPort(t, hubURL)}
	var err error
	if o.api, err = forwarder.Start(o.apiBackend); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = o.api.Close() })
	if o.hub, err = forwarder.Start(o.hubBackend); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = o.hub.Close() })
	return o
}

// begin cuts the node off both, as a control plane outage or a partition
// does: open connections die, new ones are refused.
func (o *outage) begin() {
	o.cutAPIServer()
	o.cutHub()
}

// cutAPIServer cuts the node off kube-apiserver alone, cutHub off the
// hub alone.
func (o *outage) cutAPIServer() {
	o.api.Remove(o.apiBackend)
	o.api.Cut(o.apiBackend)
}

func (o *outage) cutHub() {
	o.hub.Remove(o.hubBackend)
	o.hub.Cut(o.hubBackend)
}

func (o *outage) end() {
	o.api.Add(o.apiBackend)
	o.hub.Add(o.hubBackend)
}

// TestNodeWorksFromItsCopyThroughAnOutage cuts a node off kube-apiserver
// and the hub. Its kubelet's reads are served from the endpoint's copy of
// the node's view: a watch open before stays open, a reflector started
// meanwhile (a restarted kubelet) gets its secret, the pods of the node
// list; writes fail. After the outage, a change made meanwhile reaches
// the open watch once, and the copy is kube-apiserver's again.
func TestNodeWorksFromItsCopyThroughAnOutage(t *testing.T) {
	hub := startHub(t)
	o := newOutage(t, hub.URL)
	kp, err := cp.ClientCA.ClientCert("system:node:node-o", []string{"system:nodes"}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	n := startNodeWith(t, "node-o", nodeSpec{apiServer: "https://" + o.api.Addr(), hub: "https://" + o.hub.Addr(), kubelet: kp})
	ns := workload(t, "node-o")
	ctx := context.Background()
	kubelet := kubernetes.NewForConfigOrDie(n.kubelet)

	testserver.Eventually(t, 60*time.Second, "the copy holds the pod's secret", func(context.Context) error {
		if got := metric(t, n, "nodeproxy_node_copy_objects"); got == "0" {
			return fmt.Errorf("%s objects in the copy", got)
		}
		_, err := kubelet.CoreV1().Secrets(ns).Get(ctx, "s", metav1.GetOptions{ResourceVersion: "0"})
		if err != nil {
			return err
		}
		if got := metric(t, n, `nodeproxy_node_requests_total{path="copy",resource="secrets",verb="get"}`); got == "0" {
			return fmt.Errorf("the get was not served from the copy")
		}
		return nil
	})
	t.Run("live, the gets before status writes come from the copy", func(t *testing.T) {
		// The status manager's get of a pod, resourceVersion "": a
		// consistent read of the copy, not a request to kube-apiserver.
		copied := `nodeproxy_node_requests_total{path="copy",resource="pods",verb="get"}`
		p, err := kubelet.CoreV1().Pods(ns).Get(ctx, "p", metav1.GetOptions{})
		if err != nil || p.Spec.NodeName != "node-o" {
			t.Fatalf("the node's pod: %v, %v", p, err)
		}
		if got := metric(t, n, copied); got != "1" {
			t.Fatalf("%s = %s after the get, want 1", copied, got)
		}
		if consistent := metric(t, n, `nodeproxy_node_copy_consistent_reads_total{result="ok"}`); consistent == "0" {
			t.Errorf("the get was not a consistent read of the copy")
		}
		// A pod the copy lacks may be bound a moment ago, or another
		// node's: kube-apiserver's to answer, not the copy's 404.
		if _, err := kubelet.CoreV1().Pods(ns).Get(ctx, "none", metav1.GetOptions{}); err == nil {
			t.Fatal("a pod that does not exist was read")
		}
		if got := metric(t, n, copied); got != "1" {
			t.Fatalf("%s = %s after a get of a pod the copy lacks, want still 1", copied, got)
		}
		// The CSI plugin manager's get of the node's CSINode, at start.
		admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
		if _, err := admin.StorageV1().CSINodes().Create(ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node-o"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		testserver.Eventually(t, 30*time.Second, "the node's CSINode from the copy", func(ctx context.Context) error {
			if _, err := kubelet.StorageV1().CSINodes().Get(ctx, "node-o", metav1.GetOptions{}); err != nil {
				return err
			}
			if got := metric(t, n, `nodeproxy_node_requests_total{path="copy",resource="csinodes",verb="get"}`); got == "0" {
				return fmt.Errorf("not from the copy")
			}
			return nil
		})
	})
	before := reflect(t, kubelet, ns, "s")
	eventuallyPassword(t, "the reflector before the outage", before, "pw-s")
	l, err := kubelet.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=s", ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	open, err := kubelet.CoreV1().Secrets(ns).Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=s", ResourceVersion: l.ResourceVersion, AllowWatchBookmarks: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Stop()

	o.begin()
	testserver.Eventually(t, 60*time.Second, "/readyz says the node is offline", func(context.Context) error {
		if code, body := get(t, n.metrics+"/readyz", ""); code != 200 || !strings.Contains(body, "offline") {
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		return nil
	})

	t.Run("reads are served from the copy", func(t *testing.T) {
		s, err := kubelet.CoreV1().Secrets(ns).Get(ctx, "s", metav1.GetOptions{})
		if err != nil || string(s.Data["password"]) != "pw-s" {
			t.Fatalf("the secret offline: %v, %v", s, err)
		}
		pods, err := kubelet.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-o"})
		if err != nil || len(pods.Items) != 1 || pods.Items[0].Name != "p" {
			t.Fatalf("the node's pods offline: %v, %v", pods, err)
		}
		node, err := kubelet.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=node-o"})
		if err != nil {
			t.Fatalf("the node's Node offline: %v", err)
		}
		_ = node
		if _, err := kubelet.CoreV1().Secrets(ns).Get(ctx, "other", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("a secret outside the copy, offline: %v, want 404 (the copy's word is the only one)", err)
		}
	})
	t.Run("a restarted kubelet's reflector gets its secret", func(t *testing.T) {
		after := reflect(t, kubelet, ns, "s")
		eventuallyPassword(t, "a reflector started offline", after, "pw-s")
	})
	t.Run("writes fail", func(t *testing.T) {
		_, err := kubelet.CoreV1().Events(ns).Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: "offline-"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "p"},
		}, metav1.CreateOptions{})
		if err == nil {
			t.Fatal("a write succeeded offline")
		}
	})

	rotate(t, ns, "s", "changed offline")
	time.Sleep(2 * time.Second) // the change is in the hub's cache, not on the node
	if p := before(); p != "pw-s" {
		t.Fatalf("the reflector read %q while offline", p)
	}
	o.end()
	eventuallyPassword(t, "the change made offline, after the outage", before, "changed offline")

	// The watch opened before the outage sees the change, once.
	var seen []string
	deadline := time.After(60 * time.Second)
	for len(seen) == 0 || seen[len(seen)-1] != "changed offline" {
		select {
		case ev, ok := <-open.ResultChan():
			if !ok {
				t.Fatalf("the watch opened before the outage ended; saw %v", seen)
			}
			switch ev.Type {
			case watch.Bookmark:
				continue
			case watch.Modified:
				seen = append(seen, string(ev.Object.(*corev1.Secret).Data["password"]))
			default:
				t.Fatalf("event %s %v; saw %v", ev.Type, ev.Object, seen)
			}
		case <-deadline:
			t.Fatalf("the watch opened before the outage did not see the change; saw %v", seen)
		}
	}
	if len(seen) != 1 {
		t.Fatalf("the watch saw %v, want the change once", seen)
	}
	if got := metric(t, n, `nodeproxy_node_copy_reads_total{mode="offline"}`); got == "0" {
		t.Errorf("no read counted offline")
	}
}

// TestCopyWatchEventsAreKubeAPIServersBytes: a kubelet watch answered
// from the copy of the node's view sends, frame for frame, what
// kube-apiserver sends for the same change, in protobuf and in JSON.
func TestCopyWatchEventsAreKubeAPIServersBytes(t *testing.T) {
	hub := startHub(t)
	n := startNode(t, "node-copy-wire", hub.URL)
	ns := workload(t, "node-copy-wire")
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	kubelet := kubernetes.NewForConfigOrDie(n.kubelet)
	testserver.Eventually(t, 60*time.Second, "the secret in the copy", func(ctx context.Context) error {
		_, err := kubelet.CoreV1().Secrets(ns).Get(ctx, "s", metav1.GetOptions{ResourceVersion: "0"})
		if err == nil && metric(t, n, `nodeproxy_node_requests_total{path="copy",resource="secrets",verb="get"}`) == "0" {
			return fmt.Errorf("not from the copy")
		}
		return err
	})
	path, query := "/api/v1/namespaces/"+ns+"/secrets", url.Values{"fieldSelector": {"metadata.name=s"}}
	round := 0
	for _, mediaType := range []string{runtime.ContentTypeProtobuf, runtime.ContentTypeJSON} {
		t.Run(mediaType, func(t *testing.T) {
			// Every attempt's frames must be kube-apiserver's; one must be
			// the copy's. A loaded machine can drop the hub connection
			// (keepalive), and a watch opened then goes to the hub's
			// channel, whose frames are compared too.
			for attempt := 1; ; attempt++ {
				round++
				if fromCopy := copyWatchFrame(t, n, admin, kubelet, ns, path, query, mediaType, round); fromCopy {
					return
				}
				if attempt == 3 {
					t.Fatal("three watches, none answered from the copy")
				}
			}
		})
	}
}

// copyWatchFrame opens a watch of secret s as the node and as an admin,
// changes s, compares the two frames, and reports whether the node's was
// answered from the copy.
func copyWatchFrame(t *testing.T, n *node, admin, kubelet kubernetes.Interface, ns, path string, query url.Values, mediaType string, round int) bool {
	t.Helper()
	ctx := context.Background()
	before := counter(t, n, `nodeproxy_node_requests_total{path="copy",resource="secrets",verb="watch"}`)
	s, err := admin.CoreV1().Secrets(ns).Get(ctx, "s", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The copy must hold the version the watch starts from.
	testserver.Eventually(t, 30*time.Second, "the copy at the secret's version", func(ctx context.Context) error {
		got, err := kubelet.CoreV1().Secrets(ns).Get(ctx, "s", metav1.GetOptions{ResourceVersion: "0"})
		if err != nil || got.ResourceVersion != s.ResourceVersion {
			return fmt.Errorf("%v, %v", got.ResourceVersion, err)
		}
		return nil
	})
	direct := openWatch(t, cp.AdminConfig(), path, query, s.ResourceVersion, mediaType)
	through := openWatch(t, n.kubelet, path, query, s.ResourceVersion, mediaType)
	patch := fmt.Sprintf(`{"metadata":{"managedFields":[{}]},"data":{"password":%q}}`, base64.StdEncoding.EncodeToString([]byte("round-"+strconv.Itoa(round))))
	if _, err := admin.CoreV1().Secrets(ns).Patch(ctx, "s", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	want, got := direct.next(t), through.next(t)
	if string(got) != string(want) {
		t.Fatalf("the endpoint sent\n%q\nkube-apiserver\n%q", got, want)
	}
	return counter(t, n, `nodeproxy_node_requests_total{path="copy",resource="secrets",verb="watch"}`) > before
}
