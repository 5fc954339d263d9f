package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/authorizer"
	"github.com/nodeproxy/nodeproxy/shard"
	"github.com/nodeproxy/nodeproxy/watchmux"
)

// StatusReasonNotOwner is the reason of the 307 a sharded replica
// answers a node's bulk get or bulk watch upgrade with when another
// replica serves the node (docs/api.md, "Sharded replicas").
const StatusReasonNotOwner metav1.StatusReason = "NotOwner"

// shardRouter sends each node to the replica that owns it: a node's bulk
// get or bulk watch upgrade that another replica owns is answered 307 with
// the owner's stable name, and a node's open connection whose node has
// gone to another replica is ended with 503, which the client resumes
// from on a new connection through the Service, and so at the owner.
// Callers other than nodes (kube-proxy's token, users) read cluster-wide
// types, which every replica serves: never redirected.
type shardRouter struct {
	members            *Membership
	service, namespace string
	// port is the one every replica serves on (--secure-port), named in
	// the redirect.
	port int
	// moveSpread is how long the connections one table change moves are
	// ended over: moveSpread in production.
	moveSpread time.Duration

	mu    sync.Mutex
	conns map[*nodeConn]struct{} // guarded by mu: open node connections
}

// moveSpread spreads the connections a table change moves over 10 s, not
// all at once: each one costs the new owner a view's resume and a
// re-authentication, and kube-apiserver a TokenReview and
// SubjectAccessReviews, and a replica that comes back after a moment of
// failed readiness would otherwise send its whole share over and back
// in one burst. Against the session's own pause before a redial (up to
// 100 ms), it is the difference between a herd and a trickle; a
// connection not yet ended keeps being served meanwhile, by a replica
// that still holds its range.
const moveSpread = 10 * time.Second

func newShardRouter(m *Membership, service, namespace string, port int) *shardRouter {
	r := &shardRouter{members: m, service: service, namespace: namespace, port: port, moveSpread: moveSpread, conns: map[*nodeConn]struct{}{}}
	m.OnChange(r.moved)
	return r
}

// nodeConn is a node's open bulk watch connection.
type nodeConn struct {
	node string
	end  chan<- *metav1.Status
	once sync.Once
}

// owner is who serves the node of r's caller, when it is another replica
// ("" otherwise: not a node, or this replica, or nobody known).
func (s *shardRouter) owner(r *http.Request) (node, owner string) {
	u, ok := request.UserFrom(r.Context())
	if !ok {
		return "", ""
	}
	node, isNode := authorizer.NodeName(u)
	if !isNode || node == "" {
		return "", ""
	}
	owner = s.members.Table().OwnerOf(node)
	if owner == s.members.Self() {
		return node, ""
	}
	return node, owner
}

// route answers r with 307 when r is a node's bulk get or bulk watch
// upgrade and another replica owns the node, and reports whether it did.
func (s *shardRouter) route(w http.ResponseWriter, r *http.Request, kind string) bool {
	node, owner := s.owner(r)
	if node == "" {
		return false
	}
	if owner == "" {
		shardRouting.WithLabelValues(kind, routeServed).Inc()
		return false
	}
	shardRouting.WithLabelValues(kind, routeRedirected).Inc()
	loc := "https://" + shard.Host(owner, s.service, s.namespace) + ":" + strconv.Itoa(s.port) + r.URL.RequestURI()
	klog.V(4).InfoS("Redirecting a node to the replica that owns it", "node", node, "owner", owner, "kind", kind)
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: http.StatusTemporaryRedirect, Reason: StatusReasonNotOwner,
		Message: fmt.Sprintf("node %q is served by hub replica %q at %s", node, owner, loc),
		// The Location again, for clients whose websocket libraries
		// hand back the refusal's body but not its headers.
		Details: &metav1.StatusDetails{Name: owner, Kind: "Replica", Causes: []metav1.StatusCause{{Type: "Location", Message: loc}}},
	}
	w.Header().Set("Location", loc)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTemporaryRedirect)
	_ = json.NewEncoder(w).Encode(&st)
	return true
}

// follow keeps r's connection, served here, until ctx ends, so that it
// is ended on end with 503 when its node goes to another replica. Only
// a node's connections are followed.
func (s *shardRouter) follow(ctx context.Context, r *http.Request, end chan<- *metav1.Status) {
	u, ok := request.UserFrom(r.Context())
	if !ok {
		return
	}
	node, isNode := authorizer.NodeName(u)
	if !isNode || node == "" {
		return
	}
	c := &nodeConn{node: node, end: end}
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	})
}

// moved ends, spread over moveSpread, the connections of the nodes next
// no longer gives this replica. Each is checked against the table of its
// turn: a node given back meanwhile stays.
func (s *shardRouter) moved(_, next *shard.Table) {
	self := s.members.Self()
	var leaving []*nodeConn
	s.mu.Lock()
	for c := range s.conns {
		if o := next.OwnerOf(c.node); o != "" && o != self {
			leaving = append(leaving, c)
		}
	}
	s.mu.Unlock()
	if len(leaving) == 0 {
		return
	}
	klog.InfoS("Ending the connections of nodes another replica now serves", "connections", len(leaving), "over", s.moveSpread)
	go func() {
		pause := s.moveSpread / time.Duration(len(leaving))
		for i, c := range leaving {
			if i > 0 {
				time.Sleep(pause)
			}
			owner := s.members.Table().OwnerOf(c.node)
			if owner == "" || owner == self {
				continue
			}
			c.once.Do(func() {
				shardRouting.WithLabelValues("watch", routeMoved).Inc()
				klog.V(2).InfoS("Ending a node's connection: another replica serves it now", "node", c.node, "owner", owner)
				c.end <- &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable,
					Message: fmt.Sprintf("node %q is served by hub replica %q now; resubscribe", c.node, owner)}
			})
		}
	}()
}

// isBulkGet reports whether r is a bulk get.
func isBulkGet(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.Path == watchmux.Path
}
