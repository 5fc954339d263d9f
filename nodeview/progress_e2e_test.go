package nodeview_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/transport"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	hubpkg "github.com/nodeproxy/nodeproxy/hub"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// TestProgressRequestAgainstKubeAPIServer: a service is written, and as
// soon as the hub's cache has it (a bulk watch channel of services on
// the same connection, fed by the same cache, shows it) the node asks
// its view for progress: the service's ADDED comes before the answer,
// whether the view had taken it in when the request came or not. Asking
// a bulk watch channel, or a channel that is not open, is refused.
func TestProgressRequestAgainstKubeAPIServer(t *testing.T) {
	ctx := context.Background()
	admin := prepare(t)
	// The view carries the services of the namespaces of its node's
	// pods: a pod makes the test's namespace one.
	createPod(t, admin, podOn("progress-pod", "nv-p"))
	hub := testserver.Start(t, cp, testserver.Options{})
	client, view, c := openViewOn(t, hub, "nv-p")
	services, err := client.Watch(ctx, v1alpha1.GetOperation{
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "services"}, Namespace: ns,
		Options: metav1.ListOptions{ResourceVersion: ""},
	})
	if err != nil {
		t.Fatal(err)
	}

	// A quiet view answers too.
	if err := client.RequestProgress(ctx, view.ID, "quiet"); err != nil {
		t.Fatal(err)
	}
	c.until(view.Events, "BOOKMARK progress=quiet")
	proofs := func() float64 {
		m, err := controlplane.Scrape(ctx, hub.Client(t, cp.AdminConfig()), hub.URL+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		return m.Sum("nodeproxy_nodeview_progress_proofs_total")
	}
	before := proofs()

	for i := range 5 {
		name := fmt.Sprintf("progress-%d", i)
		if _, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: name + ".example.com"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		awaitService(t, services, name)
		token := fmt.Sprintf("after-%d", i)
		if err := client.RequestProgress(ctx, view.ID, token); err != nil {
			t.Fatal(err)
		}
		c.until(view.Events, "BOOKMARK progress="+token)
		added, answer := slices.Index(c.log, "ADDED Service "+ns+"/"+name), slices.Index(c.log, "BOOKMARK progress="+token)
		if added < 0 || added > answer {
			t.Fatalf("the answer to %s came before the service the cache had when it was asked: %s", token, strings.Join(c.log, " | "))
		}
	}
	// Every type's watch works and heard from kube-apiserver within the
	// default bound (its list, a bookmark, an event): no request asked it.
	if got := proofs() - before; got != 0 {
		t.Errorf("%v types of the progress requests were proved by asking kube-apiserver, with every watch working: want none", got)
	}

	for _, tc := range []struct {
		name    string
		channel int64
		code    int32
	}{
		{"a bulk watch channel", services.ID, http.StatusBadRequest},
		{"a channel not open", 9999, http.StatusNotFound},
	} {
		err := client.RequestProgress(ctx, tc.channel, "refused")
		var status *apierrors.StatusError
		if !errors.As(err, &status) || status.ErrStatus.Code != tc.code {
			t.Errorf("a progress request to %s: %v, want %d", tc.name, err, tc.code)
		}
	}
}

// openViewOn waits for hub to be ready, opens node's view on it and
// reads the initial state; the connection closes with the test.
func openViewOn(t *testing.T, hub *testserver.Server, node string) (*watchmux.Client, *watchmux.Channel, *nodeCopy) {
	t.Helper()
	hub.WaitReady(t, 90*time.Second)
	client, err := watchmux.Dial(context.Background(), nodeClient(t, hub.URL, node))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	op := viewOf(node, "")
	op.Options.SendInitialEvents = ptr.To(true)
	view, err := client.Watch(context.Background(), op)
	if err != nil {
		t.Fatal(err)
	}
	c := &nodeCopy{t: t, held: map[string]string{}}
	c.until(view.Events, "BOOKMARK")
	return client, view, c
}

// awaitService reads a bulk watch channel of services until name's
// ADDED, and fails after 30 s.
func awaitService(t *testing.T, ch *watchmux.Channel, name string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-ch.Events:
			if !ok || ev.Type == watch.Error {
				t.Fatalf("the services channel ended: %v", ev.Status)
			}
			var m metav1.PartialObjectMetadata
			if err := json.Unmarshal(ev.Object, &m); err != nil {
				t.Fatal(err)
			}
			if ev.Type == watch.Added && m.Name == name {
				return
			}
		case <-timeout:
			t.Fatalf("service %s not in the hub's cache within 30 s", name)
		}
	}
}

// stallWatches stands for a hub cut off from kube-apiserver on one type
// without knowing it (a partition that drops packets, a stuck
// connection): once stalled is set, the replica's own watches of
// resource (not the metadata-only questions it asks kube-apiserver)
// stay open and deliver nothing more, what they were reading included.
// Until then they go through, so the replica syncs (its list may be a
// streaming one, a watch) and is ready.
func stallWatches(resource string, stalled *atomic.Bool) transport.WrapperFunc {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err != nil || req.URL.Query().Get("watch") != "true" || !strings.HasSuffix(req.URL.Path, "/"+resource) ||
				strings.Contains(req.Header.Get("Accept"), "as=PartialObjectMetadata") {
				return resp, err
			}
			resp.Body = &stalledBody{ReadCloser: resp.Body, stalled: stalled, closed: make(chan struct{})}
			return resp, nil
		})
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

type stalledBody struct {
	io.ReadCloser
	stalled *atomic.Bool
	once    sync.Once
	closed  chan struct{}
}

func (b *stalledBody) Read(p []byte) (int, error) {
	if !b.stalled.Load() {
		n, err := b.ReadCloser.Read(p)
		if !b.stalled.Load() {
			return n, err
		}
	}
	<-b.closed
	return 0, io.EOF
}

func (b *stalledBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return b.ReadCloser.Close()
}

// TestProgressRequestIsNotAnsweredFromAStalledCache: a replica whose
// watch of services delivers nothing (it is ready: its watch is open)
// must not answer a progress request as if its cache were as fresh as
// kube-apiserver: a service created before the request is not in its
// cache, so an answer would let the node's copy serve a consistent read
// without it. It refuses the request (no bookmark for the token, which
// the node endpoint takes as "read elsewhere"), and counts it.
func TestProgressRequestIsNotAnsweredFromAStalledCache(t *testing.T) {
	ctx := context.Background()
	admin := prepare(t)
	var stalled atomic.Bool
	// A replica asks kube-apiserver about a type its watch has not heard
	// from for --node-view-heard-within: a second here, where the
	// default leaves a cut-off watch served for a minute and a half.
	heardWithin := time.Second
	hub := testserver.Start(t, cp, testserver.Options{Configure: func(o *hubpkg.Options) {
		o.KubeTransportWrapper = stallWatches("services", &stalled)
		o.NodeViewHeardWithin = heardWithin
	}})
	createPod(t, admin, podOn("stalled-pod", "nv-stalled"))
	client, view, c := openViewOn(t, hub, "nv-stalled")

	stalled.Store(true)
	time.Sleep(2 * heardWithin) // the stalled watch hears nothing meanwhile
	if _, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stalled"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "stalled.example.com"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	refusals := func() float64 {
		m, err := controlplane.Scrape(ctx, hub.Client(t, cp.AdminConfig()), hub.URL+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		return m.Sum("nodeproxy_nodeview_progress_refusals_total", "resource", "services")
	}
	before := refusals()
	if err := client.RequestProgress(ctx, view.ID, "stalled"); err != nil {
		t.Fatal(err)
	}
	poll := time.NewTicker(200 * time.Millisecond)
	defer poll.Stop()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case ev, ok := <-view.Events:
			if !ok {
				t.Fatalf("the view closed; events: %s", strings.Join(c.log, " | "))
			}
			if c.apply(ev) != "BOOKMARK progress=stalled" {
				continue
			}
			if _, held := c.held["Service "+ns+"/stalled"]; !held {
				t.Fatalf("the progress request was answered without the service kube-apiserver had when it was asked: the cache of services is stalled; events: %s",
					strings.Join(c.log, " | "))
			}
			return // answered with it: the watch came back
		case <-poll.C:
			if refusals() > before {
				return
			}
		case <-timeout:
			t.Fatalf("the progress request was neither answered nor refused within 60 s; events: %s", strings.Join(c.log, " | "))
		}
	}
}
