package endpoint

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"
)

// The node's Lease is the kubelet's heartbeat, which stays out of the
// node's view (docs/api.md, "Reads from the node's copy"). The endpoint
// remembers it instead from the answers to the kubelet's own writes of
// it, which carry the whole Lease as kube-apiserver stored it, and
// answers the kubelet's get of it from that memory: the lease controller
// gets its Lease at start and after a failed renewal, and a kubelet
// restart then reads nothing off the node.
//
// The memory is kube-apiserver's Lease unless someone else wrote it
// since. The kubelet renews with an update at the Lease's
// resourceVersion, so such a write shows at its next renewal as 409
// Conflict (or 404, deleted), and any write that fails, or whose outcome
// the endpoint did not see, is forgotten: the next get goes to
// kube-apiserver, as every get did before.

// leaseOp is what a request of the kubelet does to its Lease.
type leaseOp int

const (
	leaseNone   leaseOp = iota // not the node's Lease, or leaves it as it is (a dry run, a watch)
	leaseGet                   // a get of it at resourceVersion "" or "0": the memory's to answer
	leaseWrite                 // a create, update or patch: its answer is the Lease to remember
	leaseDelete                // a delete of it, or of the namespace's Leases
)

// Reasons the memory forgets the Lease, the values of the forgets
// metric's "reason" label.
const (
	forgotConflict   = "conflict"   // 409: someone else wrote it
	forgotNotFound   = "not_found"  // 404: someone deleted it
	forgotFailed     = "failed"     // any other failure, or no answer: the write may or may not have been applied
	forgotDeleted    = "deleted"    // the kubelet deletes it
	forgotOffline    = "offline"    // a get while neither the hub nor kube-apiserver answers
	forgotUnreadable = "unreadable" // an answer the endpoint cannot read as the node's Lease
)

// maxLeaseBytes bounds the answer to a write that the memory reads: a
// node's Lease, managed fields included, is under 1 KiB. A larger
// answer is passed on unread, and the Lease forgotten.
const maxLeaseBytes = 64 << 10

// leaseRoute says what req, of the kubelet of node, does to node's
// Lease: coordination.k8s.io leases/<node> in kube-node-lease. A get is
// the memory's only at resourceVersion "" (the latest, which the memory
// is but for someone else's write, which the next renewal finds) or "0"
// (any), with no other option but timeout (the kubelet's heartbeat
// client sends its own, which an answer from memory keeps); any other
// read goes where it went. A write of another version of the group is
// one too: it changes the same object.
func leaseRoute(req *http.Request, info *apirequest.RequestInfo, node string) leaseOp {
	if info == nil || !info.IsResourceRequest || info.APIGroup != coordinationv1.GroupName || info.Resource != "leases" ||
		info.Namespace != corev1.NamespaceNodeLease || info.Subresource != "" {
		return leaseNone
	}
	query := req.URL.Query()
	if _, dry := query["dryRun"]; dry {
		return leaseNone // changes nothing
	}
	switch info.Verb {
	case "get":
		if info.APIVersion != coordinationv1.SchemeGroupVersion.Version || info.Name != node {
			return leaseNone
		}
		for k, v := range query {
			switch {
			case k == "timeout":
			case k != "resourceVersion" || len(v) != 1 || v[0] != "" && v[0] != "0":
				return leaseNone
			}
		}
		return leaseGet
	case "create":
		return leaseWrite // the Lease's name is in the body; the answer tells
	case "update", "patch":
		if info.Name == node {
			return leaseWrite
		}
	case "delete":
		if info.Name == node {
			return leaseDelete
		}
	case "deletecollection":
		return leaseDelete
	}
	return leaseNone
}

// leaseMemory is the node's Lease as the kubelet's last write of it left
// it in kube-apiserver. It keeps no goroutine: the endpoint calls it as
// requests come and go.
type leaseMemory struct {
	node string

	mu sync.Mutex
	// lease is never changed once remembered, only replaced; nil: the
	// next get is kube-apiserver's.
	lease *coordinationv1.Lease // guarded by mu
	rv    uint64                // lease's resourceVersion, guarded by mu
	// epoch counts forgets: a write's answer is remembered only if
	// nothing was forgotten while it was in flight (a delete or a failed
	// write in between may have been applied after it).
	epoch uint64 // guarded by mu
}

func newLeaseMemory(node string) *leaseMemory { return &leaseMemory{node: node} }

// get returns a copy of the Lease, nil if the memory holds none.
func (m *leaseMemory) get() *coordinationv1.Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lease == nil {
		return nil
	}
	return m.lease.DeepCopy() // the encoder sets the copy's kind
}

// begin is called as a write leaves for kube-apiserver; its answer is
// handed to written with what begin returned.
func (m *leaseMemory) begin() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.epoch
}

// forget drops the Lease, so that the next get goes to kube-apiserver.
func (m *leaseMemory) forget(reason string) {
	m.mu.Lock()
	held := m.lease != nil
	m.lease, m.rv = nil, 0
	m.epoch++
	m.mu.Unlock()
	if held {
		leaseForgets.WithLabelValues(reason).Inc()
		klog.V(4).InfoS("Forgot the node's Lease: the kubelet's next get of it goes to kube-apiserver",
			"lease", klog.KRef(corev1.NamespaceNodeLease, m.node), "reason", reason)
	}
}

// written remembers l, the answer to a write that began at epoch. An
// answer older than the Lease held (two writes whose answers crossed)
// is not: kube-apiserver applied it first.
func (m *leaseMemory) written(epoch uint64, l *coordinationv1.Lease) {
	rv, err := strconv.ParseUint(l.ResourceVersion, 10, 64)
	if err != nil {
		m.forget(forgotUnreadable)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if epoch != m.epoch || m.lease != nil && rv <= m.rv {
		return
	}
	m.lease, m.rv = l, rv
	klog.V(5).InfoS("Remembered the node's Lease from the kubelet's write", "lease", klog.KObj(l), "resourceVersion", rv)
}

// observe takes kube-apiserver's answer to a write of the Lease that
// began at epoch (resp nil: none came, err says why). It reads a
// successful answer's body and leaves resp.Body to read as it was.
func (m *leaseMemory) observe(epoch uint64, resp *http.Response, err error) {
	switch {
	case err != nil:
		m.forget(forgotFailed)
		return
	case resp.StatusCode == http.StatusConflict:
		m.forget(forgotConflict)
		return
	case resp.StatusCode == http.StatusNotFound:
		m.forget(forgotNotFound)
		return
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		m.forget(forgotFailed)
		return
	}
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		m.forget(forgotUnreadable) // kube-apiserver compresses only answers far larger than a Lease
		return
	}
	body, readErr := io.ReadAll(io.LimitReader(resp.Body, maxLeaseBytes+1))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
	if readErr != nil || len(body) > maxLeaseBytes {
		m.forget(forgotUnreadable)
		return
	}
	obj, decodeErr := runtime.Decode(deserializer, body)
	l, ok := obj.(*coordinationv1.Lease)
	switch {
	case decodeErr != nil || !ok:
		m.forget(forgotUnreadable)
	case l.Namespace == corev1.NamespaceNodeLease && l.Name == m.node:
		m.written(epoch, l)
	}
	// Another name: a create of a Lease that is not the node's, which
	// leaves the node's as it was.
}

// serveLease answers a request of the kubelet that op says is of its
// Lease, and returns false, having written nothing, when it goes where
// it would without the memory: a get the memory cannot answer, or
// anything that is not the Lease's.
func (e *Endpoint) serveLease(w http.ResponseWriter, req *http.Request, info *apirequest.RequestInfo, op leaseOp) bool {
	switch op {
	case leaseNone:
		return false
	case leaseGet:
		l := e.lease.get()
		if l == nil {
			return false
		}
		if e.offline() {
			// The renewal after this get would fail as surely as the get
			// does: kube-apiserver's failure tells the lease controller
			// (and whoever reads the kubelet's log) what is wrong, and
			// the memory starts again from kube-apiserver's word.
			e.lease.forget(forgotOffline)
			return false
		}
		requests.WithLabelValues(pathMemory, "leases", "get").Inc()
		klog.V(4).InfoS("Answered the kubelet's get of its Lease from the endpoint's memory",
			"lease", klog.KObj(l), "resourceVersion", l.ResourceVersion)
		writeObjectIn(w, req, http.StatusOK, l, coordinationv1.SchemeGroupVersion)
		return true
	case leaseDelete:
		e.lease.forget(forgotDeleted)
	}
	epoch := e.lease.begin()
	resource, verb := describe(req, info)
	e.upstream.serveObserved(w, req, resource, verb, func(resp *http.Response, err error) {
		if op == leaseDelete {
			e.lease.forget(forgotDeleted) // a write that began meanwhile may land before it
			return
		}
		e.lease.observe(epoch, resp, err)
	})
	return true
}
