package passthrough_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

var widgetsGVR = schema.GroupVersionResource{Group: "e2e.nodeproxy.io", Version: "v1", Resource: "widgets"}

func watchOn(group, version, resource, namespace string, opts metav1.ListOptions) v1alpha1.GetOperation {
	return v1alpha1.GetOperation{Resource: metav1.GroupVersionResource{Group: group, Version: version, Resource: resource}, Namespace: namespace, Options: opts}
}

// streaming asks for the initial state, then the bookmark that ends it:
// a channel that has sent it is past its initial state, for cached and
// uncached types alike.
func streaming() metav1.ListOptions {
	yes := true
	return metav1.ListOptions{SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true}
}

// next waits for ch's next event.
func next(t *testing.T, ch *watchmux.Channel) (watchmux.Event, metav1.ObjectMeta) {
	t.Helper()
	select {
	case ev, ok := <-ch.Events:
		if !ok {
			t.Fatalf("channel %d closed", ch.ID)
		}
		var o struct{ Metadata metav1.ObjectMeta }
		if ev.Object != nil {
			if err := json.Unmarshal(ev.Object, &o); err != nil {
				t.Fatal(err)
			}
		}
		return ev, o.Metadata
	case <-time.After(30 * time.Second):
		t.Fatalf("channel %d: no event in 30 s", ch.ID)
	}
	panic("unreachable")
}

// TestBulkWatchSpansCachedCoreCRDAndAggregatedTypes: one connection, one
// channel each on a cached type (configmaps), a built-in type nodeproxy
// does not cache (Deployments), a CRD (widgets) and an aggregated API
// (counts): each sends its initial state and the bookmark that ends it,
// then a change to each arrives on its own channel. Closing the uncached
// channels stops their watches on kube-apiserver.
func TestBulkWatchSpansCachedCoreCRDAndAggregatedTypes(t *testing.T) {
	srv := startHub(t)
	alice, err := cp.UserConfig("alice")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before := openUncached(t, srv)
	c, err := watchmux.Dial(ctx, alice) // through kube-apiserver's aggregator
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	admin := cp.AdminConfig()
	kube := kubernetes.NewForConfigOrDie(admin)
	dyn := dynamic.NewForConfigOrDie(admin)
	for _, tc := range []struct {
		sel    v1alpha1.GetOperation
		name   string
		change func() error
	}{
		{watchOn("", "v1", "configmaps", ns, streaming()), "settings", func() error {
			_, err := kube.CoreV1().ConfigMaps(ns).Patch(ctx, "settings", types.MergePatchType, []byte(`{"data":{"k":"`+strconv.Itoa(time.Now().Nanosecond())+`"}}`), metav1.PatchOptions{})
			return err
		}},
		{watchOn("apps", "v1", "deployments", ns, streaming()), "web", func() error {
			_, err := kube.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"metadata":{"annotations":{"k":"`+strconv.Itoa(time.Now().Nanosecond())+`"}}}`), metav1.PatchOptions{})
			return err
		}},
		{watchOn("e2e.nodeproxy.io", "v1", "widgets", ns, streaming()), "gear", func() error {
			_, err := dyn.Resource(widgetsGVR).Namespace(ns).Patch(ctx, "gear", types.MergePatchType, []byte(`{"spec":{"teeth":`+strconv.Itoa(time.Now().Nanosecond()%100)+`}}`), metav1.PatchOptions{})
			return err
		}},
		{watchOn(countsGroup, countsVersion, "counts", ns, streaming()), "visits", func() error {
			counts.Increment(ns, "visits")
			return nil
		}},
	} {
		r := tc.sel.Resource.Resource
		ch, err := c.Watch(ctx, tc.sel)
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		ev, meta := next(t, ch)
		if ev.Type != watch.Added || meta.Name != tc.name {
			t.Fatalf("%s: first event %s %s, want ADDED %s", r, ev.Type, meta.Name, tc.name)
		}
		ev, meta = next(t, ch)
		if ev.Type != watch.Bookmark || meta.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
			t.Fatalf("%s: after the initial state %s %+v, want the bookmark that ends it", r, ev.Type, meta)
		}
		if err := tc.change(); err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		ev, meta = next(t, ch)
		if ev.Type != watch.Modified || meta.Name != tc.name {
			t.Fatalf("%s: after the change %s %s, want MODIFIED %s", r, ev.Type, meta.Name, tc.name)
		}
		if tc.sel.Resource.Resource == "configmaps" {
			continue
		}
		// An uncached channel is one watch on kube-apiserver, open as
		// long as the channel is, and closed with it.
		if got := openUncached(t, srv); got != before+1 {
			t.Errorf("%s: %d uncached channels open, want %d", r, got, before+1)
		}
		if err := c.CloseWatch(ctx, ch); err != nil {
			t.Fatal(err)
		}
		testserver.Eventually(t, 10*time.Second, "the upstream watch of a closed channel stops", func(context.Context) error {
			if got := openUncached(t, srv); got != before {
				return fmt.Errorf("%d uncached channels open, want %d", got, before)
			}
			return nil
		})
	}
}

// TestBulkWatchOpenRefusedWithKubeAPIServersStatus: bob may not watch
// Deployments or counts; kube-apiserver refuses the watch as bob, and the
// open gets its 403, while bob's channel on a CRD opens on the same
// connection. A node is decided by kube-apiserver too (the Node
// authorizer, then RBAC): services yes, Deployments no.
func TestBulkWatchOpenRefusedWithKubeAPIServersStatus(t *testing.T) {
	srv := startHub(t)
	bob, err := cp.UserConfig("bob")
	if err != nil {
		t.Fatal(err)
	}
	node, err := cp.NodeConfig("node-a")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name    string
		cfg     *rest.Config
		sel     v1alpha1.GetOperation
		refusal string // "" allowed
	}{
		{"bob, Deployments", bob, watchOn("apps", "v1", "deployments", ns, metav1.ListOptions{}), `User "bob" cannot watch resource "deployments"`},
		{"bob, counts (aggregated)", bob, watchOn(countsGroup, countsVersion, "counts", ns, metav1.ListOptions{}), `User "bob" cannot watch resource "counts"`},
		{"bob, widgets (CRD)", bob, watchOn("e2e.nodeproxy.io", "v1", "widgets", ns, metav1.ListOptions{}), ""},
		{"node-a, services", node, watchOn("", "v1", "services", "", metav1.ListOptions{}), ""},
		{"node-a, Deployments", node, watchOn("apps", "v1", "deployments", ns, metav1.ListOptions{}), `User "system:node:node-a" cannot watch resource "deployments"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := watchmux.Dial(ctx, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			before := openUncached(t, srv)
			ch, err := c.Watch(ctx, tc.sel)
			switch {
			case tc.refusal == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refusal == "":
				if ev, _ := next(t, ch); ev.Type != watch.Added {
					t.Errorf("first event %s, want ADDED", ev.Type)
				}
			case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.refusal):
				t.Fatalf("got %v, want kube-apiserver's 403: %s", err, tc.refusal)
			default:
				if got := openUncached(t, srv); got != before {
					t.Errorf("a refused open left %d uncached channels open, want %d", got, before)
				}
			}
		})
	}
}

// openUncached reads nodeproxy_passthrough_channels from the hub.
func openUncached(t *testing.T, srv *testserver.Server) int {
	t.Helper()
	resp, err := srv.Client(t, cp.AdminConfig()).Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "nodeproxy_passthrough_channels "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(n)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatal("/metrics has no nodeproxy_passthrough_channels")
	return 0
}
