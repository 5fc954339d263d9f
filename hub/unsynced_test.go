package hub_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/transport"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/hub"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

// holdFirstList holds the replica's own list of resource (and every
// other request of its reflector, not the metadata-only questions the
// hub asks kube-apiserver) until release is closed: the request is sent
// at once, so kube-apiserver answers it at the version it has then, and
// the answer reaches the cache only when released, as a list still on
// its way (a large type, a slow link) does. sent is closed when the
// first request has been answered.
func holdFirstList(resource string, sent chan<- struct{}, release <-chan struct{}) transport.WrapperFunc {
	var once sync.Once
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err != nil || !strings.HasSuffix(req.URL.Path, "/"+resource) ||
				strings.Contains(req.Header.Get("Accept"), "as=PartialObjectMetadata") {
				return resp, err
			}
			once.Do(func() { close(sent) })
			resp.Body = &heldBody{ReadCloser: resp.Body, release: release}
			return resp, nil
		})
	}
}

type heldBody struct {
	io.ReadCloser
	release <-chan struct{}
}

func (b *heldBody) Read(p []byte) (int, error) {
	<-b.release
	return b.ReadCloser.Read(p)
}

// TestConsistentReadOfAStoreStillListingIsNotProvedByAProbeFromZero: a
// consistent read of a type whose first list is still on its way must not
// be answered with a state older than kube-apiserver's when it arrived.
// A probe of such a store would be a watch from "0", whose synthetic
// ADDED events come in key order, not in resourceVersion order: the last
// of them can be older than another object, and "no change between the
// last event and the bookmark" then covers a list answered before that
// object was written.
func TestConsistentReadOfAStoreStillListingIsNotProvedByAProbeFromZero(t *testing.T) {
	const node = "node-unsynced"
	ctx := context.Background()
	testserver.InstallRBAC(t, cp)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	createRuntimeClass := func(name string) {
		t.Helper()
		rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: "runc"}
		if _, err := admin.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.NodeV1().RuntimeClasses().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	// The last in key order, and the older.
	createRuntimeClass("zzzz-unsynced-old")

	sent, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	releaseList := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseList)
	srv := testserver.Start(t, cp, testserver.Options{Configure: func(o *hub.Options) {
		o.KubeTransportWrapper = holdFirstList("runtimeclasses", sent, release)
	}})
	select {
	case <-sent:
	case <-time.After(90 * time.Second):
		t.Fatal("the replica did not list runtime classes within 90 s")
	}
	// Written after the replica's list was answered, first in key order.
	createRuntimeClass("aaaa-unsynced-new")

	nodeCfg, err := cp.NodeConfig(node)
	if err != nil {
		t.Fatal(err)
	}
	nodeClient := srv.Client(t, nodeCfg)
	// Serving, and telling callers apart (every check but the cache's).
	waitReadyzCheck(t, srv, nodeClient, "[+]client-ca ok", 90*time.Second)
	probes := testserver.Gathered(t, "nodeproxy_bulk_progress_probes_total", map[string]string{"resource": "runtimeclasses"})
	type answer struct {
		code   int
		raw    []byte
		status *metav1.Status
	}
	answered := make(chan answer, 1)
	go func() {
		code, raw, status := postBulkGet(t, srv, nodeClient, v1alpha1.GetOperation{
			Resource: metav1.GroupVersionResource{Group: "node.k8s.io", Version: "v1", Resource: "runtimeclasses"},
			Options:  metav1.ListOptions{ResourceVersion: ""},
		})
		answered <- answer{code, raw, status}
	}()
	// Let the list in once the read has had a probe's answer, or has
	// been answered without one.
	var a answer
	got := false
	testserver.Eventually(t, 30*time.Second, "a probe of runtime classes or the read's answer", func(context.Context) error {
		select {
		case a = <-answered:
			got = true
			return nil
		default:
		}
		if testserver.Gathered(t, "nodeproxy_bulk_progress_probes_total", map[string]string{"resource": "runtimeclasses"}) > probes {
			return nil
		}
		return io.ErrNoProgress
	})
	releaseList()
	if !got {
		a = <-answered
	}
	if a.code != http.StatusCreated {
		// Refused: the node endpoint then asks kube-apiserver, which is
		// right; only a stale answer is wrong.
		t.Logf("refused: %d %s", a.code, a.status.Message)
		return
	}
	var list nodev1.RuntimeClassList
	if err := json.Unmarshal(a.raw, &list); err != nil {
		t.Fatal(err)
	}
	t.Logf("answered at %s, %d items", list.ResourceVersion, len(list.Items))
	var names []string
	for _, rc := range list.Items {
		names = append(names, rc.Name)
	}
	if !strings.Contains(strings.Join(names, " "), "aaaa-unsynced-new") {
		t.Fatalf("a consistent read answered %v at resourceVersion %s: without aaaa-unsynced-new, which kube-apiserver had when the read arrived",
			names, list.ResourceVersion)
	}
}
