package endpoint

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/component-base/metrics/testutil"
)

func TestLeaseRouteIsTheNodesOwnLeaseAlone(t *testing.T) {
	const own = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-a"
	for _, tc := range []struct {
		method, url string
		want        leaseOp
	}{
		// The lease controller's get, at start and after a failed renewal.
		{"GET", own, leaseGet},
		{"GET", own + "?resourceVersion=", leaseGet},
		{"GET", own + "?resourceVersion=0", leaseGet},
		// The kubelet's heartbeat client has a timeout, which client-go
		// sends.
		{"GET", own + "?timeout=10s", leaseGet},
		// Reads the memory does not answer.
		{"GET", own + "?resourceVersion=12", leaseNone},
		{"GET", own + "?resourceVersion=0&pretty=true", leaseNone},
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases?fieldSelector=metadata.name%3Dnode-a", leaseNone},
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases?watch=true&fieldSelector=metadata.name%3Dnode-a", leaseNone},
		{"GET", "/apis/coordination.k8s.io/v1/watch/namespaces/kube-node-lease/leases/node-a", leaseNone},
		{"GET", "/apis/coordination.k8s.io/v1beta1/namespaces/kube-node-lease/leases/node-a", leaseNone},
		// Another node's, another namespace's, another type.
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-b", leaseNone},
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/node-a", leaseNone},
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leasecandidates/node-a", leaseNone},
		{"GET", "/api/v1/nodes/node-a", leaseNone},
		// Writes: their answers are the Lease.
		{"POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", leaseWrite},
		{"PUT", own, leaseWrite},
		{"PATCH", own, leaseWrite},
		{"PUT", "/apis/coordination.k8s.io/v1beta1/namespaces/kube-node-lease/leases/node-a", leaseWrite},
		{"PUT", own + "?dryRun=All", leaseNone},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-b", leaseNone},
		{"DELETE", own, leaseDelete},
		{"DELETE", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", leaseDelete},
		{"DELETE", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-b", leaseNone},
	} {
		req := httptest.NewRequest(tc.method, tc.url, nil)
		info, err := requestInfo.NewRequestInfo(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := leaseRoute(req, info, "node-a"); got != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.url, got, tc.want)
		}
	}
}

// leaseOf is node-a's Lease at rv.
func leaseOf(rv string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		TypeMeta:   metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-a", Namespace: "kube-node-lease", ResourceVersion: rv},
	}
}

// answer is kube-apiserver's answer to a write, in protobuf as the
// kubelet asks for it.
func answer(t *testing.T, code int, obj runtime.Object) *http.Response {
	t.Helper()
	var body bytes.Buffer
	if obj != nil {
		if err := protobuf.NewSerializer(scheme, scheme).Encode(obj, &body); err != nil {
			t.Fatal(err)
		}
	}
	return &http.Response{StatusCode: code, Header: http.Header{}, Body: io.NopCloser(&body)}
}

func rvHeld(m *leaseMemory) string {
	if l := m.get(); l != nil {
		return l.ResourceVersion
	}
	return ""
}

func TestLeaseMemoryIsTheKubeletsLastWrite(t *testing.T) {
	RegisterMetrics()
	m := newLeaseMemory("node-a")
	e := m.begin()
	resp := answer(t, http.StatusOK, leaseOf("10"))
	m.observe(e, resp, nil)
	if got := rvHeld(m); got != "10" {
		t.Fatalf("after a renewal: %q, want 10", got)
	}
	// The caller still reads the answer whole.
	if b, err := io.ReadAll(resp.Body); err != nil || len(b) == 0 {
		t.Fatalf("the answer's body after the memory read it: %d bytes, %v", len(b), err)
	}

	// Two writes whose answers crossed: the later version stays.
	e1, e2 := m.begin(), m.begin()
	m.observe(e2, answer(t, http.StatusOK, leaseOf("12")), nil)
	m.observe(e1, answer(t, http.StatusOK, leaseOf("11")), nil)
	if got := rvHeld(m); got != "12" {
		t.Fatalf("after crossed answers: %q, want 12", got)
	}
	// A create of a Lease that is not the node's changes nothing.
	other := leaseOf("13")
	other.Name = "node-b"
	m.observe(m.begin(), answer(t, http.StatusCreated, other), nil)
	if got := rvHeld(m); got != "12" {
		t.Fatalf("after another Lease's create: %q, want 12", got)
	}
}

func TestLeaseMemoryForgetsOnAnyDoubt(t *testing.T) {
	RegisterMetrics()
	conflict := &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusConflict, Reason: metav1.StatusReasonConflict}
	for _, tc := range []struct {
		name   string
		resp   func(t *testing.T) *http.Response
		err    error
		reason string
	}{
		{"conflict", func(t *testing.T) *http.Response { return answer(t, http.StatusConflict, conflict) }, nil, forgotConflict},
		{"not found", func(t *testing.T) *http.Response { return answer(t, http.StatusNotFound, nil) }, nil, forgotNotFound},
		{"unavailable", func(t *testing.T) *http.Response { return answer(t, http.StatusServiceUnavailable, nil) }, nil, forgotFailed},
		{"no answer", nil, errors.New("connection reset"), forgotFailed},
		{"not a Lease", func(t *testing.T) *http.Response { return answer(t, http.StatusOK, conflict) }, nil, forgotUnreadable},
		{"no version", func(t *testing.T) *http.Response { return answer(t, http.StatusOK, leaseOf("")) }, nil, forgotUnreadable},
		{"compressed", func(t *testing.T) *http.Response {
			r := answer(t, http.StatusOK, leaseOf("20"))
			r.Header.Set("Content-Encoding", "gzip")
			return r
		}, nil, forgotUnreadable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newLeaseMemory("node-a")
			m.observe(m.begin(), answer(t, http.StatusOK, leaseOf("10")), nil)
			before := forgetsOf(t, tc.reason)
			var resp *http.Response
			if tc.resp != nil {
				resp = tc.resp(t)
			}
			m.observe(m.begin(), resp, tc.err)
			if got := rvHeld(m); got != "" {
				t.Errorf("still holds the Lease at %s", got)
			}
			if got := forgetsOf(t, tc.reason) - before; got != 1 {
				t.Errorf("forgets{reason=%q} rose by %v, want 1", tc.reason, got)
			}
		})
	}

	// A write in flight while the Lease is forgotten (a delete, a
	// failed write: either may be applied after it) is not remembered.
	m := newLeaseMemory("node-a")
	e := m.begin()
	m.forget(forgotDeleted)
	m.observe(e, answer(t, http.StatusOK, leaseOf("30")), nil)
	if got := rvHeld(m); got != "" {
		t.Errorf("remembered a write that crossed a forget: %s", got)
	}
	m.observe(m.begin(), answer(t, http.StatusOK, leaseOf("31")), nil)
	if got := rvHeld(m); got != "31" {
		t.Errorf("after the next write: %q, want 31", got)
	}
}

func forgetsOf(t *testing.T, reason string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(leaseForgets.WithLabelValues(reason))
	if err != nil {
		t.Fatal(err)
	}
	return v
}
