package watch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/utils/ptr"

	"github.com/nodeproxy/nodeproxy/apis/bulk/v1alpha1"
	"github.com/nodeproxy/nodeproxy/bulk"
	"github.com/nodeproxy/nodeproxy/bulk/internal/bulktest"
)

// recorder is a watchmux.Sink that writes down what it is given.
type recorder struct {
	mu     sync.Mutex
	events []string
	rvs    []string // each event's object's resourceVersion
	closed bool
	close  []func()
	done   chan struct{}
}

func newRecorder() *recorder { return &recorder{done: make(chan struct{})} }

func (r *recorder) record(t apiwatch.EventType, object []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	var o struct{ Metadata metav1.ObjectMeta }
	_ = json.Unmarshal(object, &o)
	e := string(t) + " " + o.Metadata.Name
	if t == apiwatch.Bookmark {
		e = fmt.Sprintf("BOOKMARK %s", o.Metadata.ResourceVersion)
		if o.Metadata.Annotations[metav1.InitialEventsAnnotationKey] == "true" {
			e += " initial-events-end"
		}
	}
	r.events = append(r.events, e)
	r.rvs = append(r.rvs, o.Metadata.ResourceVersion)
	return true
}

func (r *recorder) Send(t apiwatch.EventType, object []byte) bool    { return r.record(t, object) }
func (r *recorder) Initial(t apiwatch.EventType, object []byte) bool { return r.record(t, object) }
func (r *recorder) Done() <-chan struct{}                            { return r.done }
func (r *recorder) Protobuf() bool                                   { return false }
func (r *recorder) OnClose(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.close = append(r.close, f)
}
func (r *recorder) Close(s *metav1.Status) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.events = append(r.events, fmt.Sprintf("ERROR %d %s", s.Code, s.Message))
	fs := r.close
	r.mu.Unlock()
	close(r.done)
	for _, f := range fs {
		f()
	}
}

// wait returns the events once there are n, or fails.
func (r *recorder) wait(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		got := append([]string(nil), r.events...)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t.Fatalf("want %d events, have %v", n, r.events)
	return nil
}

func watcherFixture(t *testing.T) (*bulktest.Fixture, *Watcher) {
	t.Helper()
	f := bulktest.New(t, 64)
	return f, newTestWatcher(t, f)
}

// watcherFixtureWith asks latest (nil: nobody) for kube-apiserver's
// resourceVersions.
func watcherFixtureWith(t *testing.T, latest bulk.LatestVersions) (*bulktest.Fixture, *Watcher) {
	t.Helper()
	f := bulktest.New(t, 64)
	f.Catalog.AskLatest(latest)
	return f, newTestWatcher(t, f)
}

func newTestWatcher(t *testing.T, f *bulktest.Fixture) *Watcher {
	t.Helper()
	w := NewWatcher(f.Catalog, f.Graph, Options{BookmarkInterval: 50 * time.Millisecond, ReauthorizeInterval: time.Hour, RBACRecheckAfter: []time.Duration{0, 10 * time.Millisecond}})
	// Nothing reports RBAC changes here but the tests themselves: no
	// rounds every minute behind their backs.
	w.RBACWatched()
	w.reauthorizer.schedule.coalesce = 0 // a round per delay, at once
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go w.Run(ctx)
	time.Sleep(20 * time.Millisecond) // the dispatchers take their positions
	return w
}

func open(t *testing.T, w *Watcher, u user.Info, sel v1alpha1.GetOperation) *recorder {
	t.Helper()
	r := newRecorder()
	run, refused := w.Open(request.WithUser(context.Background(), u), &sel, r)
	if refused != nil {
		t.Fatalf("refused: %s", refused.Message)
	}
	run()
	return r
}

func TestWatchSelectorsTurnChangesIntoEvents(t *testing.T) {
	f, w := watcherFixture(t)
	s := bulktest.Secret("a", "s1")
	f.Add(t, s)
	sel := bulktest.GetOp("secrets", "a", metav1.ListOptions{LabelSelector: "tier=web", SendInitialEvents: ptr.To(true)})
	r := open(t, w, bulktest.Admin, sel)

	labelled := bulktest.Secret("a", "s1")
	labelled.Labels = map[string]string{"tier": "web"}
	f.Add(t, labelled) // enters the selection
	f.Add(t, bulktest.Secret("a", "s2"))
	again := bulktest.Secret("a", "s1")
	again.Labels = map[string]string{"tier": "web"}
	f.Add(t, again)                      // stays in it
	f.Add(t, bulktest.Secret("a", "s1")) // leaves it
	got := r.wait(t, 4)
	want := "BOOKMARK"
	if !strings.HasPrefix(got[0], want) || !strings.HasSuffix(got[0], "initial-events-end") {
		t.Fatalf("first event %q, want the bookmark ending an empty initial state", got[0])
	}
	if strings.Join(got[1:4], ", ") != "ADDED s1, MODIFIED s1, DELETED s1" {
		t.Errorf("events %v", got)
	}
}

func TestWatchResumesFromAResourceVersion(t *testing.T) {
	f, w := watcherFixture(t)
	f.Add(t, bulktest.Secret("a", "s1"))
	from := f.Cache.Store(bulktest.GVR("secrets")).Snapshot().RV
	f.Add(t, bulktest.Secret("a", "s2"))
	f.Add(t, bulktest.Secret("a", "s1"))
	time.Sleep(100 * time.Millisecond) // dispatched past from
	r := open(t, w, bulktest.Admin, bulktest.GetOp("secrets", "a", metav1.ListOptions{ResourceVersion: fmt.Sprint(from)}))
	f.Add(t, bulktest.Secret("a", "s3"))
	got := r.wait(t, 3)
	if strings.Join(got[:3], ", ") != "ADDED s2, MODIFIED s1, ADDED s3" {
		t.Errorf("from %d: %v", from, got)
	}

	for range 70 { // past the 64 changes the log holds
		f.Add(t, bulktest.Secret("b", "churn"))
	}
	r = open(t, w, bulktest.Admin, bulktest.GetOp("secrets", "a", metav1.ListOptions{ResourceVersion: fmt.Sprint(from)}))
	if got := r.wait(t, 1); !strings.HasPrefix(got[0], "ERROR 410") {
		t.Errorf("from an expired version: %v", got)
	}
}

func TestNodeChannelClosesWhenAccessIsLost(t *testing.T) {
	f, w := watcherFixture(t)
	f.Add(t, bulktest.Secret("a", "s1"))
	f.Add(t, bulktest.Pod("a", "p1", "node-a", "s1"))
	r := open(t, w, bulktest.NodeA, bulktest.GetOp("secrets", "a", metav1.ListOptions{FieldSelector: "metadata.name=s1"}))
	if got := r.wait(t, 1); got[0] != "ADDED s1" {
		t.Fatalf("initial state %v", got)
	}
	if err := f.Cache.Store(bulktest.GVR("pods")).Delete(bulktest.Pod("a", "p1", "node-a", "s1")); err != nil {
		t.Fatal(err)
	}
	got := r.wait(t, 2)
	if !strings.HasPrefix(got[1], "ERROR 403 access lost") {
		t.Fatalf("after the pod's deletion: %v", got)
	}
	f.Add(t, bulktest.Secret("a", "s1"))
	time.Sleep(100 * time.Millisecond)
	if got := r.wait(t, 2); len(got) != 2 {
		t.Errorf("events after ERROR: %v", got)
	}

	// Refused outright when it does not reach the object.
	rr := newRecorder()
	if _, refused := w.Open(request.WithUser(context.Background(), bulktest.NodeA), ptr.To(bulktest.GetOp("secrets", "a", metav1.ListOptions{FieldSelector: "metadata.name=s1"})), rr); refused == nil || refused.Code != 403 {
		t.Errorf("watching an unreachable secret: %+v", refused)
	}
}

func TestWatchBookmarks(t *testing.T) {
	f, w := watcherFixture(t)
	f.Add(t, bulktest.Secret("a", "s1"))
	r := open(t, w, bulktest.Admin, bulktest.GetOp("secrets", "a", metav1.ListOptions{AllowWatchBookmarks: true, ResourceVersion: "1"}))
	f.Add(t, bulktest.Secret("b", "elsewhere")) // not selected, but moves the position on
	got := r.wait(t, 2)
	if got[0] != "ADDED s1" || strings.Contains(strings.Join(got, ","), "elsewhere") {
		t.Fatalf("events %v", got)
	}
	for _, e := range got {
		if strings.HasPrefix(e, "BOOKMARK") {
			return
		}
	}
	t.Errorf("no periodic bookmark: %v", got)
}

func TestWatchRefusesBadSelectors(t *testing.T) {
	_, w := watcherFixture(t)
	for _, tc := range []struct {
		name string
		sel  v1alpha1.GetOperation
		want string
	}{
		{"unknown resource", bulktest.FieldOp("endpoints", "a", ""), "selector.resource: Unsupported value"},
		{"paging", bulktest.GetOp("secrets", "a", metav1.ListOptions{Limit: 5}), "selector.options.limit: Forbidden"},
		{"reachableFrom", bulktest.FieldOp("secrets", "", bulk.ReachableFromField+"=node-a"), "is for bulk get"},
		{"exact", bulktest.GetOp("secrets", "a", metav1.ListOptions{ResourceVersion: "5", ResourceVersionMatch: metav1.ResourceVersionMatchExact}), "selector.options.resourceVersionMatch: Unsupported value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, refused := w.Open(request.WithUser(context.Background(), bulktest.Admin), &tc.sel, newRecorder())
			if refused == nil || refused.Code != 422 || !strings.Contains(refused.Message, tc.want) {
				t.Fatalf("got %+v, want 422 with %q", refused, tc.want)
			}
		})
	}
}

// TestWatchRefusesFieldsKubeAPIServerDoesNotKnow: 400 in kube-apiserver's
// words, nothing added, as a watch on kube-apiserver would be refused.
func TestWatchRefusesFieldsKubeAPIServerDoesNotKnow(t *testing.T) {
	_, w := watcherFixture(t)
	sel := bulktest.FieldOp("secrets", "a", "spec.nodeName=n")
	_, refused := w.Open(request.WithUser(context.Background(), bulktest.Admin), &sel, newRecorder())
	if refused == nil || refused.Code != 400 || refused.Reason != metav1.StatusReasonBadRequest || refused.Message != "field label not supported: spec.nodeName" {
		t.Fatalf("got %+v, want 400 field label not supported: spec.nodeName", refused)
	}
}

// TestOtherUsersChannelsAreAuthorizedAgain: a channel of a user other than
// a node lives as long as the delegated authorizer allows it; an error
// keeps it until the next round; a node's channels are never asked about.
func TestOtherUsersChannelsAreAuthorizedAgain(t *testing.T) {
	f, w := watcherFixture(t)
	f.Add(t, bulktest.Secret("a", "s1"))
	secrets := open(t, w, bulktest.Admin, bulktest.GetOp("secrets", "a", metav1.ListOptions{}))
	configmaps := open(t, w, bulktest.Admin, bulktest.GetOp("configmaps", "a", metav1.ListOptions{}))
	pods := open(t, w, bulktest.NodeA, bulktest.GetOp("pods", "", metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"}))
	if got := secrets.wait(t, 1); got[0] != "ADDED s1" {
		t.Fatalf("initial state %v", got)
	}
	ctx := context.Background()
	reauthorized := func() int {
		w.reauthorizer.mu.Lock()
		defer w.reauthorizer.mu.Unlock()
		return len(w.reauthorizer.streams)
	}
	if n := reauthorized(); n != 2 {
		t.Fatalf("%d channels to authorize again, want bulktest.Admin's 2 (not the node's)", n)
	}

	w.reauthorizer.round(ctx, reasonPeriodic, everyone)
	f.Fail(errors.New("kube-apiserver unreachable"))
	w.reauthorizer.round(ctx, reasonPeriodic, everyone)
	f.Fail(nil)
	for _, r := range []*recorder{secrets, configmaps, pods} {
		r.mu.Lock()
		if r.closed {
			t.Errorf("closed while allowed, or on an authorizer error: %v", r.events)
		}
		r.mu.Unlock()
	}

	f.Allow(func(a authorizer.Attributes) bool { return a.GetResource() != "secrets" })
	w.reauthorizer.round(ctx, reasonPeriodic, everyone)
	got := secrets.wait(t, 2)
	if !strings.HasPrefix(got[1], "ERROR 403 access lost") || !strings.Contains(got[1], `cannot watch secrets in namespace "a"`) {
		t.Errorf("after RBAC stopped allowing it: %v", got)
	}
	configmaps.mu.Lock()
	if configmaps.closed {
		t.Errorf("a channel still allowed was closed: %v", configmaps.events)
	}
	configmaps.mu.Unlock()
	if n := reauthorized(); n != 1 {
		t.Errorf("%d channels left to authorize again, want 1", n)
	}
}

// TestNodeChannelsRBACDecidesAreAuthorizedAgain: a node's channel on a
// type the graph does not decide (endpointslices) lives as long as the
// delegated authorizer allows it, as another user's does.
func TestNodeChannelsRBACDecidesAreAuthorizedAgain(t *testing.T) {
	f, w := watcherFixture(t)
	f.Allow(func(a authorizer.Attributes) bool { return a.GetResource() == "endpointslices" })
	sel := v1alpha1.GetOperation{Resource: metav1.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}}
	slices := open(t, w, bulktest.NodeA, sel)
	services := open(t, w, bulktest.NodeA, bulktest.GetOp("services", "", metav1.ListOptions{}))
	w.reauthorizer.round(context.Background(), reasonPeriodic, everyone)
	f.Allow(func(authorizer.Attributes) bool { return false })
	w.reauthorizer.round(context.Background(), reasonPeriodic, everyone)
	if got := slices.wait(t, 1); !strings.HasPrefix(got[0], "ERROR 403 access lost") {
		t.Errorf("after RBAC stopped allowing it: %v", got)
	}
	services.mu.Lock()
	defer services.mu.Unlock()
	if services.closed {
		t.Errorf("the services channel, which the system:node role allows, was closed: %v", services.events)
	}
}

// TestChannelsOfOneSelectionEachGetTheirOwn: channels sharing a selection
// are matched as one group, yet each starts where it started, and one
// closing leaves the others fed; a channel of another namespace gets
// nothing of this one's.
func TestChannelsOfOneSelectionEachGetTheirOwn(t *testing.T) {
	f, w := watcherFixture(t)
	sel := func(ns, rv string) v1alpha1.GetOperation {
		return bulktest.GetOp("secrets", ns, metav1.ListOptions{LabelSelector: "name notin (hidden)", FieldSelector: "metadata.name!=other", ResourceVersion: rv})
	}
	s1 := bulktest.Secret("a", "s1")
	f.Add(t, s1)
	early := open(t, w, bulktest.Admin, sel("a", s1.ResourceVersion))
	elsewhere := open(t, w, bulktest.Admin, sel("b", s1.ResourceVersion))
	s2 := bulktest.Secret("a", "s2")
	f.Add(t, s2)
	late := open(t, w, bulktest.Admin, sel("a", s2.ResourceVersion))
	f.Add(t, bulktest.Secret("a", "hidden"))
	f.Add(t, bulktest.Secret("a", "other"))
	f.Add(t, bulktest.Secret("a", "s3"))
	if got := early.wait(t, 2); strings.Join(got, ",") != "ADDED s2,ADDED s3" {
		t.Errorf("the early channel got %v", got)
	}
	if got := late.wait(t, 1); strings.Join(got, ",") != "ADDED s3" {
		t.Errorf("the late channel got %v", got)
	}
	early.Close(&metav1.Status{Code: 499, Message: "client went"})
	f.Add(t, bulktest.Secret("a", "s4"))
	if got := late.wait(t, 2); strings.Join(got, ",") != "ADDED s3,ADDED s4" {
		t.Errorf("the late channel, after the early one closed, got %v", got)
	}
	elsewhere.mu.Lock()
	defer elsewhere.mu.Unlock()
	if len(elsewhere.events) != 0 {
		t.Errorf("namespace b's channel got %v", elsewhere.events)
	}
}
