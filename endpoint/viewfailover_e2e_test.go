package endpoint_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/hub"
	"github.com/nodeproxy/nodeproxy/test/forwarder"
	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// TestKubeletWatchOfTheCopyOutlivesItsHubReplica: the failover of
// TestKubeletWatchOutlivesItsHubReplica with the node view on. Two hub
// replicas behind one address; both have had kube-apiserver's bookmarks
// of runtime classes, which nobody changes, and replica b's have since
// stopped coming (its watch of the type held, as a replica whose
// bookmark is simply due later), so that the copy's position, from a, is
// ahead of b's on that type. Replica a is cut off and stopped. The view
// resumes on b: its first bookmark is lower than the copy's on runtime
// classes, but within what the copy holds. No view is reopened whole (no
// initial state on either replica, the endpoint's reopens unchanged but
// for ended, no resume refused), and the kubelet's watch of a secret,
// served from the copy, sees every change once, in order, none older
// than one it saw.
func TestKubeletWatchOfTheCopyOutlivesItsHubReplica(t *testing.T) {
	ctx := context.Background()
	a := startHub(t)
	held := &heldWatch{resource: "/runtimeclasses", open: closedChan()}
	b := startHubWith(t, testserver.Options{Configure: func(o *hub.Options) { o.KubeTransportWrapper = held.wrap }})
	t.Cleanup(held.release) // before b stops: its reflector reads on
	addrA, addrB := strings.TrimPrefix(a.URL, "https://"), strings.TrimPrefix(b.URL, "https://")
	fwd, err := forwarder.Start(addrA) // the endpoint's connection lands on a
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fwd.Close() })

	const node = "node-vfo"
	n := startNode(t, node, "https://"+fwd.Addr())
	ns := workload(t, node)
	kubelet := kubernetes.NewForConfigOrDie(n.kubelet)
	byName := fields.OneTermEqualSelector("metadata.name", "s").String()
	testserver.Eventually(t, 30*time.Second, "the secret read from the copy", func(ctx context.Context) error {
		before := metric(t, n, `nodeproxy_node_requests_total{path="copy",resource="secrets",verb="list"}`)
		if _, err := kubelet.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{FieldSelector: byName}); err != nil {
			return err
		}
		if metric(t, n, `nodeproxy_node_requests_total{path="copy",resource="secrets",verb="list"}`) == before {
			return fmt.Errorf("the list was not the copy's")
		}
		return nil
	})

	// Both replicas bookmark runtime classes, then b's bookmarks stop,
	// and a's next one takes a past b.
	rc := v1alpha1.NodeViewTypeIndex("runtimeclasses")
	testserver.Eventually(t, 3*time.Minute, "both replicas' bookmarks of runtime classes", func(context.Context) error {
		for _, r := range []*testserver.Server{a, b} {
			if p := viewPositionOn(t, r.URL, node); p.At[rc] == p.Since[rc] {
				return fmt.Errorf("%s: runtime classes at %d, none since its list", r.URL, p.At[rc])
			}
		}
		return nil
	})
	held.hold()
	behind := viewPositionOn(t, b.URL, node).At[rc]
	testserver.Eventually(t, 3*time.Minute, "a's bookmark of runtime classes past b's", func(context.Context) error {
		if at := viewPositionOn(t, a.URL, node).At[rc]; at <= behind {
			return fmt.Errorf("a at %d, b at %d", at, behind)
		}
		return nil
	})
	// A consistent read brings the copy to a's position (a progress
	// request), past b's on runtime classes.
	list, err := kubelet.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{FieldSelector: byName})
	if err != nil {
		t.Fatal(err)
	}
	w, err := kubelet.CoreV1().Secrets(ns).Watch(ctx, metav1.ListOptions{FieldSelector: byName, ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	before := viewCounts(t, n)

	const each = 5
	want := rotations(t, ns, "s", "before", each)
	got := readNewer(t, w, each, list.ResourceVersion)
	fwd.Add(addrB) // b joins the Service; a leaves it, and goes
	fwd.Remove(addrA)
	fwd.Cut(addrA)
	a.Stop(t)
	want = append(want, rotations(t, ns, "s", "after", each)...)
	got = append(got, readNewer(t, w, each, got[len(got)-1].rv)...)
	if fmt.Sprint(passwords(got)) != fmt.Sprint(want) {
		t.Fatalf("the kubelet's watch saw %v; want %v, each once, in order", passwords(got), want)
	}
	testserver.Eventually(t, 30*time.Second, "the copy live on b", func(ctx context.Context) error {
		_, err := kubelet.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{FieldSelector: byName})
		return err
	})

	after := viewCounts(t, n)
	for series, d := range map[string]float64{
		`nodeproxy_nodeview_opens_total{how="initial"}`:       0,
		`nodeproxy_nodeview_opens_total{how="replaced"}`:      0,
		`nodeproxy_node_view_reopens_total{reason="expired"}`: 0,
		`nodeproxy_node_view_reopens_total{reason="invalid"}`: 0,
		`nodeproxy_node_view_resumes_refused_total`:           0,
	} {
		if got := after[series] - before[series]; got != d {
			t.Errorf("%s moved by %v over the failover; want %v: the view was sent whole, or refused", series, got, d)
		}
	}
	if after[`nodeproxy_nodeview_opens_total{how="resumed"}`] == before[`nodeproxy_nodeview_opens_total{how="resumed"}`] {
		t.Error("no view resumed on b: the failover was not tested")
	}
	if d := after[`nodeproxy_node_requests_total{path="apiserver",resource="secrets",verb="watch"}`] - before[`nodeproxy_node_requests_total{path="apiserver",resource="secrets",verb="watch"}`]; d != 0 {
		t.Errorf("%v secrets watches went to kube-apiserver; want 0", d)
	}
	if at := viewPositionOn(t, b.URL, node).At[rc]; at != behind {
		t.Errorf("b's runtime classes moved from %d to %d while held: the resume was not on a replica behind the copy", behind, at)
	}
}

// viewCounts are the series of the node view a failover could move; the
// hubs run in the test's process, so their series are on the endpoint's
// /metrics too, summed.
func viewCounts(t *testing.T, n *node) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, series := range []string{
		`nodeproxy_nodeview_opens_total{how="initial"}`,
		`nodeproxy_nodeview_opens_total{how="replaced"}`,
		`nodeproxy_nodeview_opens_total{how="resumed"}`,
		`nodeproxy_node_view_reopens_total{reason="expired"}`,
		`nodeproxy_node_view_reopens_total{reason="invalid"}`,
		`nodeproxy_node_view_resumes_refused_total`,
		`nodeproxy_node_requests_total{path="apiserver",resource="secrets",verb="watch"}`,
	} {
		v, err := strconv.ParseFloat(metric(t, n, series), 64)
		if err != nil {
			t.Fatalf("%s: %v", series, err)
		}
		out[series] = v
	}
	return out
}

// seen is one change a watch saw: the secret's password and version.
type seen struct {
	password string
	rv       string
}

func passwords(s []seen) []string {
	var out []string
	for _, g := range s {
		out = append(out, g.password)
	}
	return out
}

// readNewer reads n MODIFIED events of w, each at a resourceVersion past
// the one before (the first past from), skipping bookmarks.
func readNewer(t *testing.T, w watch.Interface, n int, from string) []seen {
	t.Helper()
	last, err := strconv.ParseUint(from, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	var out []seen
	for len(out) < n {
		select {
		case ev, open := <-w.ResultChan():
			if !open {
				t.Fatalf("the kubelet's watch ended after %d of %d events", len(out), n)
			}
			if ev.Type == watch.Bookmark {
				continue
			}
			s, ok := ev.Object.(*corev1.Secret)
			if ev.Type != watch.Modified || !ok {
				t.Fatalf("event %s %T; want MODIFIED of the secret", ev.Type, ev.Object)
			}
			rv, err := strconv.ParseUint(s.ResourceVersion, 10, 64)
			if err != nil || rv <= last {
				t.Fatalf("the secret at %s after %d: a state no newer than one the watch saw", s.ResourceVersion, last)
			}
			last = rv
			out = append(out, seen{string(s.Data["password"]), s.ResourceVersion})
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d events within 30 s", len(out), n)
		}
	}
	return out
}

// viewPositionOn opens node's view on the hub at url afresh, as the node,
// and returns the position of its initial state: where the replica's
// views are.
func viewPositionOn(t *testing.T, url, node string) v1alpha1.NodeViewPosition {
	t.Helper()
	cfg, err := cp.NodeConfig(node)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host = url
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := watchmux.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Watch(ctx, v1alpha1.GetOperation{
		Resource: v1alpha1.NodeViewResourceV1alpha2,
		Options: metav1.ListOptions{
			FieldSelector:     fields.OneTermEqualSelector("metadata.name", node).String(),
			SendInitialEvents: ptr.To(true),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case ev, ok := <-ch.Events:
			if !ok {
				t.Fatal("the view ended before its initial state's bookmark")
			}
			if ev.Type != watch.Bookmark {
				continue
			}
			var m metav1.PartialObjectMetadata
			if err := json.Unmarshal(ev.Object, &m); err != nil {
				t.Fatal(err)
			}
			p, err := v1alpha1.ParseNodeViewPosition(m.ResourceVersion)
			if err != nil {
				t.Fatal(err)
			}
			return p
		case <-ctx.Done():
			t.Fatal("no initial state's bookmark within 30 s")
		}
	}
}

// heldWatch is a transport wrapper (hub.Options.KubeTransportWrapper)
// that, while held, holds what a replica's watch of one resource reads
// from kube-apiserver: its bookmarks stop, as when the replica's next one
// is simply due later than another's. Lists and kube-apiserver's
// progress probes pass.
type heldWatch struct {
	resource string
	mu       sync.Mutex
	open     chan struct{} // closed while not held
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

func (h *heldWatch) hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.open = make(chan struct{})
}

func (h *heldWatch) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.open:
	default:
		close(h.open)
	}
}

func (h *heldWatch) wait() {
	h.mu.Lock()
	open := h.open
	h.mu.Unlock()
	<-open
}

func (h *heldWatch) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err != nil || req.URL.Query().Get("watch") != "true" || !strings.HasSuffix(req.URL.Path, h.resource) ||
			strings.Contains(req.Header.Get("Accept"), "as=PartialObjectMetadata") {
			return resp, err
		}
		resp.Body = &heldBody{ReadCloser: resp.Body, h: h}
		return resp, nil
	})
}

type heldBody struct {
	io.ReadCloser
	h *heldWatch
}

func (b *heldBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.h.wait()
	}
	return n, err
}
