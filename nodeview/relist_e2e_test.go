package nodeview_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/hub"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// TestNameReusedAcrossKubeAPIServerRestartExpiresNothing: while
// kube-apiserver restarts, a node's pod is deleted and created again
// under its name (a new UID), as a StatefulSet recreates its pods, and
// the hub's pods reflector relists after it. A bulk watch channel of the
// node's pods and the node's view must carry on: no ERROR 410, no view
// opened afresh; each sees the old pod's DELETED, then the new pod's
// ADDED. (The hub used to start its change log over on such a relist:
// every pod channel got 410 and every view was sent again whole.)
//
// The hub's own list and watch of pods are refused from before the
// restart until the pod is back, so that the reflector can only learn of
// it by listing again; everything else the hub asks kube-apiserver goes
// through.
func TestNameReusedAcrossKubeAPIServerRestartExpiresNothing(t *testing.T) {
	ctx := context.Background()
	admin := prepare(t)
	hold := &podsHold{}
	srv := testserver.Start(t, cp, testserver.Options{Configure: func(o *hub.Options) {
		o.KubeTransportWrapper = hold.wrap
	}})
	srv.WaitReady(t, 90*time.Second)
	const node = "nv-reuse"
	createSecret(t, admin, secretOf("reuse", "1"))
	createPod(t, admin, podUsing("reused", node, "reuse"))

	client, err := watchmux.Dial(ctx, nodeClient(t, srv.URL, node))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	op := viewOf(node, "")
	op.Options.SendInitialEvents = ptr.To(true)
	viewCh, err := client.Watch(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	view := &nodeCopy{t: t, held: map[string]string{}}
	view.until(viewCh.Events, "BOOKMARK")
	podsCh, err := client.Watch(ctx, v1alpha1.GetOperation{
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Options: metav1.ListOptions{FieldSelector: "spec.nodeName=" + node, ResourceVersion: "",
			SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	pods := &nodeCopy{t: t, held: map[string]string{}}
	pods.until(podsCh.Events, "BOOKMARK")
	podKey := func(c *nodeCopy) string {
		for k := range c.held {
			if strings.HasSuffix(k, " "+ns+"/reused") {
				return k
			}
		}
		t.Fatalf("the pod is not held; events: %s", strings.Join(c.log, " | "))
		return ""
	}
	viewPod, channelPod := podKey(view), podKey(pods)
	carried := relistsCarriedOver(t, srv)

	hold.shut.Store(true)
	cp.APIServer().Kill()
	if err := cp.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	// The reflector's watch ended with kube-apiserver; it must have asked
	// again, and been refused, before the pod goes.
	testserver.Eventually(t, 30*time.Second, "the hub's pods reflector asks kube-apiserver again", func(context.Context) error {
		if hold.refused.Load() == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	old, err := admin.CoreV1().Pods(ns).Get(ctx, "reused", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.CoreV1().Pods(ns).Delete(ctx, "reused", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 30*time.Second, "the old pod is gone", func(ctx context.Context) error {
		_, err := admin.CoreV1().Pods(ns).Get(ctx, "reused", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errors.New("still there")
	})
	createPod(t, admin, podUsing("reused", node, "reuse"))
	again, err := admin.CoreV1().Pods(ns).Get(ctx, "reused", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.UID == old.UID {
		t.Fatalf("the pod came back with its old UID %s", old.UID)
	}
	hold.shut.Store(false)

	// Each consumer fails the test on ERROR (410 included), on an ADDED of
	// a pod it holds and on a DELETED of one it does not.
	view.until(viewCh.Events, "ADDED "+viewPod)
	pods.until(podsCh.Events, "ADDED "+channelPod)
	for _, c := range []*nodeCopy{view, pods} {
		// The initial state's ADDED, then the old pod's DELETED, then the
		// new pod's ADDED.
		i := slices.Index(c.log, "DELETED "+podKey(c))
		if i < 0 || slices.Index(c.log[i:], "ADDED "+podKey(c)) < 0 {
			t.Fatalf("no DELETED of the old pod before the new one's ADDED; events: %s", strings.Join(c.log, " | "))
		}
		if rv := c.held[podKey(c)]; rv != again.ResourceVersion {
			t.Errorf("holds the pod at %s, the new pod is at %s", rv, again.ResourceVersion)
		}
	}
	t.Logf("the view: %s", strings.Join(view.log, " | "))
	t.Logf("the pods channel: %s", strings.Join(pods.log, " | "))
	if got := relistsCarriedOver(t, srv); got <= carried {
		t.Fatalf("the hub's pods reflector did not relist (relists carried over: %v, before %v): the relist was not tested", got, carried)
	}
}

// relistsCarriedOver is nodeproxy_cache_relists_carried_over_total for
// pods on srv.
func relistsCarriedOver(t *testing.T, srv *testserver.Server) float64 {
	t.Helper()
	m, err := controlplane.Scrape(context.Background(), srv.Client(t, cp.AdminConfig()), srv.URL+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return m.Sum("nodeproxy_cache_relists_carried_over_total", "resource", "pods")
}

// podsHold refuses the hub's list and watch of every pod (its
// reflector's) while shut, as an unreachable kube-apiserver would; the
// metadata-only lists and watches the hub asks kube-apiserver's progress
// with go through.
type podsHold struct {
	shut    atomic.Bool
	refused atomic.Int64
}

func (h *podsHold) wrap(rt http.RoundTripper) http.RoundTripper {
	return holding{h: h, rt: rt}
}

type holding struct {
	h  *podsHold
	rt http.RoundTripper
}

func (r holding) RoundTrip(req *http.Request) (*http.Response, error) {
	if r.h.shut.Load() && req.URL.Path == "/api/v1/pods" && !strings.Contains(req.Header.Get("Accept"), "as=PartialObjectMetadata") {
		r.h.refused.Add(1)
		return nil, errors.New("the test holds the hub's pods reflector back")
	}
	return r.rt.RoundTrip(req)
}
