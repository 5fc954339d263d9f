package authorizer

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"

	"github.com/nodeproxy/nodeproxy/graph"
)

// A sharded replica's tests: this replica (the one under test) holds no
// node but node-b; its peers are httptest TLS servers serving the
// webhook over fixture's complete graph, and kube-apiserver's consistent
// reads come from a fake NodeSource, since what is under test here is
// the routing, not kube-apiserver (the differential, shards_e2e_test.go,
// runs it against a real one).

// peer is a replica holding node-a, counting what it was sent.
type peer struct {
	*httptest.Server
	reviews   atomic.Int32
	forwarded sync.Map // ForwardedHeader values seen
}

func newPeer(t *testing.T, h http.Handler) *peer {
	t.Helper()
	p := &peer{}
	p.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.reviews.Add(1)
		p.forwarded.Store(r.Header.Get(ForwardedHeader), true)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// down is the URL of a server that is no longer there.
func down(t *testing.T) string {
	s := httptest.NewTLSServer(http.NotFoundHandler())
	s.Close()
	return s.URL
}

type owners struct{ owner, secondary string }

func (o owners) Holders(node string) (bool, string, string) {
	return node == "node-b", o.owner, o.secondary
}

// fakeSource is kube-apiserver as fixture's graph has it: node-a runs
// pod ns/a, with va-a and slice-a.
type fakeSource struct {
	reads atomic.Int32
	err   error
	block chan struct{} // if set, reads wait for it
}

func (s *fakeSource) read(ctx context.Context) error {
	s.reads.Add(1)
	if s.block != nil {
		select {
		case <-s.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.err
}

func (s *fakeSource) NodePods(ctx context.Context, node string) ([]*corev1.Pod, error) {
	if err := s.read(ctx); err != nil {
		return nil, err
	}
	if node != "node-a" {
		return nil, nil
	}
	return []*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}, Spec: corev1.PodSpec{
		NodeName: "node-a", ServiceAccountName: "sa-a",
		Volumes: []corev1.Volume{
			{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "secret-a"}}},
			{Name: "p", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "pvc-a"}}},
		},
	}}}, nil
}

func (s *fakeSource) AttachmentNode(ctx context.Context, name string) (string, error) {
	if err := s.read(ctx); err != nil || name != "va-a" {
		return "", err
	}
	return "node-a", nil
}

func (s *fakeSource) SliceNode(ctx context.Context, name string) (string, error) {
	if err := s.read(ctx); err != nil || name != "slice-a" {
		return "", err
	}
	return "node-a", nil
}

// volumesOnly is this replica's graph: every PV, no pod of node-a.
func volumesOnly() *graph.Graph {
	g := graph.New()
	g.AddPV(&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-a"}, Spec: corev1.PersistentVolumeSpec{
		ClaimRef: &corev1.ObjectReference{Namespace: "ns", Name: "pvc-a"},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
			Driver: "d", NodePublishSecretRef: &corev1.SecretReference{Namespace: "ns", Name: "pv-secret-a"}}},
	}})
	return g
}

// replica is the webhook under test, with peers at owner and secondary.
func replica(t testing.TB, o owners, src NodeSource, client *http.Client) *Webhook {
	g := volumesOnly()
	return &Webhook{Authorizer: New(g), Shards: &Shards{
		Owners:     o,
		Peers:      &Peers{Client: client, Self: "replica-under-test", Timeout: 200 * time.Millisecond},
		Consistent: NewConsistent(src, g, time.Second, 1),
	}}
}

func ask(t *testing.T, h http.Handler, forwardedBy, spec string) authorizationv1.SubjectAccessReviewStatus {
	t.Helper()
	return askWithin(t, context.Background(), h, forwardedBy, spec)
}

// askWithin asks within ctx, as kube-apiserver's webhook timeout bounds
// a review.
func askWithin(t *testing.T, ctx context.Context, h http.Handler, forwardedBy, spec string) authorizationv1.SubjectAccessReviewStatus {
	t.Helper()
	rec := httptest.NewRecorder()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, WebhookPath, strings.NewReader(review(spec)))
	if forwardedBy != "" {
		r.Header.Set(ForwardedHeader, forwardedBy)
	}
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var got authorizationv1.SubjectAccessReview
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	return got.Status
}

func nodeGet(node, resource, group, ns, name string) string {
	return `{"user":"system:node:` + node + `","groups":["system:nodes"],"resourceAttributes":{"verb":"get","version":"v1","group":"` + group +
		`","resource":"` + resource + `","namespace":"` + ns + `","name":"` + name + `"}}`
}

var secretA = nodeGet("node-a", "secrets", "", "ns", "secret-a")

func counter(t *testing.T, c metrics.CounterMetric) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(c)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// authorizerFunc is a peer whose answer the test chooses.
type authorizerFunc func() (authorizer.Decision, string, error)

func (f authorizerFunc) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	return f()
}

func TestForwardsToTheOwnerAndReturnsItsAnswerAsIs(t *testing.T) {
	RegisterMetrics()
	owner := newPeer(t, &Webhook{Authorizer: authorizerFunc(func() (authorizer.Decision, string, error) {
		return authorizer.DecisionAllow, "the owner's own reason", nil
	})})
	secondary := newPeer(t, &Webhook{Authorizer: fixture(t)})
	src := &fakeSource{}
	h := replica(t, owners{owner.URL, secondary.URL}, src, owner.Client())
	before := counter(t, routedReviews.WithLabelValues(pathOwner))
	timed, err := testutil.GetHistogramMetricCount(routedDuration.WithLabelValues(pathOwner))
	if err != nil {
		t.Fatal(err)
	}

	got := ask(t, h, "", secretA)
	if !got.Allowed || got.Reason != "the owner's own reason" {
		t.Errorf("answer %+v, want the owner's: allowed, \"the owner's own reason\"", got)
	}
	if n := owner.reviews.Load(); n != 1 {
		t.Errorf("the owner was asked %d times, want 1", n)
	}
	if _, ok := owner.forwarded.Load("replica-under-test"); !ok {
		t.Errorf("the forwarded review did not carry %s: replica-under-test", ForwardedHeader)
	}
	if n, m := secondary.reviews.Load(), src.reads.Load(); n != 0 || m != 0 {
		t.Errorf("the secondary was asked %d times and kube-apiserver read %d times; want neither", n, m)
	}
	if d := counter(t, routedReviews.WithLabelValues(pathOwner)) - before; d != 1 {
		t.Errorf("routed_reviews_total{path=owner} rose by %v, want 1", d)
	}
	if n, err := testutil.GetHistogramMetricCount(routedDuration.WithLabelValues(pathOwner)); err != nil || n != timed+1 {
		t.Errorf("routed_duration_seconds{path=owner} counted %d, want %d (%v)", n, timed+1, err)
	}
}

// Only what the node's pods decide leaves the replica: its own node, a
// lease, a refusal no graph could turn are answered here.
func TestHeldNodesAndStaticAnswersAreDecidedLocally(t *testing.T) {
	owner := newPeer(t, &Webhook{Authorizer: fixture(t)})
	src := &fakeSource{}
	h := replica(t, owners{owner.URL, owner.URL}, src, owner.Client())
	for _, tc := range []struct {
		name, spec string
		allowed    bool
	}{
		{"a held node's refusal", nodeGet("node-b", "secrets", "", "ns", "secret-b"), false},
		{"a lease", `{"user":"system:node:node-a","groups":["system:nodes"],"resourceAttributes":{"verb":"update","version":"v1","group":"coordination.k8s.io","resource":"leases","namespace":"kube-node-lease","name":"node-a"}}`, true},
		{"its own Node", nodeGet("node-a", "nodes", "", "", "node-a"), true},
		{"a secret without a name", `{"user":"system:node:node-a","groups":["system:nodes"],"resourceAttributes":{"verb":"list","version":"v1","resource":"secrets","namespace":"ns"}}`, false},
		{"not a node", `{"user":"alice","resourceAttributes":{"verb":"get","version":"v1","resource":"secrets","namespace":"ns","name":"secret-a"}}`, false},
	} {
		if got := ask(t, h, "", tc.spec); got.Allowed != tc.allowed {
			t.Errorf("%s: allowed %v (%q), want %v", tc.name, got.Allowed, got.Reason, tc.allowed)
		}
	}
	if n, m := owner.reviews.Load(), src.reads.Load(); n != 0 || m != 0 {
		t.Errorf("peers asked %d times, kube-apiserver read %d times; want neither", n, m)
	}
}

func TestFallsToTheSecondaryWhenTheOwnerFails(t *testing.T) {
	RegisterMetrics()
	hangs := newPeer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // the server notices the client leave only once the body is read
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	unavailable := newPeer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
	}))
	malformed := newPeer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Status","status":"Success"}`))
	}))
	for _, tc := range []struct{ name, owner, reason string }{
		{"down", down(t), "unreachable"},
		{"hangs", hangs.URL, "timeout"},
		{"503", unavailable.URL, "status"},
		{"not a review", malformed.URL, "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			secondary := newPeer(t, &Webhook{Authorizer: fixture(t)})
			src := &fakeSource{}
			h := replica(t, owners{tc.owner, secondary.URL}, src, secondary.Client())
			failures := counter(t, peerFailures.WithLabelValues(pathOwner, tc.reason))
			if got := ask(t, h, "", secretA); !got.Allowed {
				t.Errorf("refused (%+v): the secondary holds node-a and allows it", got)
			}
			if got := ask(t, h, "", nodeGet("node-a", "secrets", "", "ns", "secret-b")); got.Allowed {
				t.Errorf("allowed another node's secret: %+v", got)
			}
			if n := secondary.reviews.Load(); n != 2 {
				t.Errorf("the secondary was asked %d times, want 2", n)
			}
			if m := src.reads.Load(); m != 0 {
				t.Errorf("kube-apiserver read %d times with the secondary up", m)
			}
			if d := counter(t, peerFailures.WithLabelValues(pathOwner, tc.reason)) - failures; d != 2 {
				t.Errorf("peer_failures_total{peer=owner,reason=%s} rose by %v, want 2", tc.reason, d)
			}
		})
	}
}

// A review another replica forwarded is decided where it arrives, even
// by a replica that does not hold the node: one hop.
func TestAForwardedReviewIsNeverForwardedAgain(t *testing.T) {
	owner := newPeer(t, &Webhook{Authorizer: fixture(t)})
	src := &fakeSource{}
	h := replica(t, owners{owner.URL, owner.URL}, src, owner.Client())
	if got := ask(t, h, "another-replica", secretA); !got.Allowed {
		t.Errorf("refused (%+v): node-a's pod uses secret-a", got)
	}
	if n := owner.reviews.Load(); n != 0 {
		t.Errorf("a forwarded review was forwarded again, %d times", n)
	}
	if m := src.reads.Load(); m != 1 {
		t.Errorf("kube-apiserver read %d times, want 1: the receiver decides from its consistent list", m)
	}
}

// With both replicas that hold node-a down, the answers are the graph's,
// from kube-apiserver's pods of node-a and this replica's PVs.
func TestBothDownDecidesFromTheConsistentList(t *testing.T) {
	RegisterMetrics()
	src := &fakeSource{}
	h := replica(t, owners{down(t), down(t)}, src, http.DefaultClient)
	before := counter(t, routedReviews.WithLabelValues(pathConsistent))
	cases := []struct {
		name, spec string
		allowed    bool
	}{
		{"its pod's secret", secretA, true},
		{"its pod", nodeGet("node-a", "pods", "", "ns", "a"), true},
		{"its pod's service account", nodeGet("node-a", "serviceaccounts", "", "ns", "sa-a"), true},
		{"its pod's claim", nodeGet("node-a", "persistentvolumeclaims", "", "ns", "pvc-a"), true},
		{"the volume bound to it", nodeGet("node-a", "persistentvolumes", "", "", "pv-a"), true},
		{"that volume's secret", nodeGet("node-a", "secrets", "", "ns", "pv-secret-a"), true},
		{"its attachment", nodeGet("node-a", "volumeattachments", "storage.k8s.io", "", "va-a"), true},
		{"its slice", nodeGet("node-a", "resourceslices", "resource.k8s.io", "", "slice-a"), true},
		{"another node's secret", nodeGet("node-a", "secrets", "", "ns", "secret-b"), false},
		{"another node's pod", nodeGet("node-a", "pods", "", "ns", "b"), false},
		{"no such attachment", nodeGet("node-a", "volumeattachments", "storage.k8s.io", "", "va-b"), false},
		{"node-c's pod's secret, node-c having no pods", nodeGet("node-c", "secrets", "", "ns", "secret-a"), false},
	}
	for _, tc := range cases {
		got := ask(t, h, "", tc.spec)
		if got.Allowed != tc.allowed || got.Denied || got.EvaluationError != "" {
			t.Errorf("%s: %+v, want allowed %v without an error", tc.name, got, tc.allowed)
		}
	}
	if d := counter(t, routedReviews.WithLabelValues(pathConsistent)) - before; d != float64(len(cases)) {
		t.Errorf("routed_reviews_total{path=consistent_list} rose by %v, want %d", d, len(cases))
	}
}

// Whatever fails, nothing is allowed: no peer, no kube-apiserver, or too
// many decisions in flight.
func TestNeverAllowsOnError(t *testing.T) {
	t.Run("kube-apiserver fails", func(t *testing.T) {
		src := &fakeSource{err: errors.New("connection refused")}
		h := replica(t, owners{down(t), down(t)}, src, http.DefaultClient)
		for _, spec := range []string{secretA, nodeGet("node-a", "volumeattachments", "storage.k8s.io", "", "va-a")} {
			got := ask(t, h, "", spec)
			if got.Allowed || got.Denied || !strings.Contains(got.EvaluationError, "connection refused") {
				t.Errorf("%+v, want no opinion with the error", got)
			}
		}
	})
	t.Run("too many in flight", func(t *testing.T) {
		src := &fakeSource{block: make(chan struct{})}
		g := volumesOnly()
		h := &Webhook{Authorizer: New(g), Shards: &Shards{
			Owners: owners{}, Peers: &Peers{Client: http.DefaultClient},
			Consistent: NewConsistent(src, g, time.Minute, 1),
		}}
		first := make(chan authorizationv1.SubjectAccessReviewStatus)
		go func() { first <- ask(t, h, "", secretA) }()
		for src.reads.Load() == 0 {
			time.Sleep(time.Millisecond) // the first holds the one slot
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		got := askWithin(t, ctx, h, "", secretA)
		if got.Allowed || !strings.Contains(got.EvaluationError, errTooManyConsistent.Error()) {
			t.Errorf("second decision: %+v, want no opinion, too many in flight", got)
		}
		close(src.block)
		if got := <-first; !got.Allowed {
			t.Errorf("first decision, its read done: %+v, want allowed", got)
		}
	})
}
