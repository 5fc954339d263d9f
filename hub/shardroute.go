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

	// bookmark, when set, bookmarks every node view at this replica's
	// position before connections move (the server's views).
	bookmark func()

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
	m.OnServing(r.moved)
	return r
}

// nodeConn is a node's open bulk watch connection.
type nodeConn struct {
	node string
	end  chan<- *metav1.Status
	once sync.Once
}

// elsewhere is the replica that serves node when it is another one:
// the ready replica the table serves it from (shard.Table.Serving);
// noReplica when no ready replica holds it, nor this one; "" when this
// replica serves it: the table's ready choice, or, no ready replica
// holding it, this one holds it (a replica the Service does not list
// ready yet, or whose readiness failed, serves what it holds rather than
// nobody).
func (s *shardRouter) elsewhere(node string) string {
	switch serving := s.members.Serving(node); {
	case serving == s.members.Self():
		return ""
	case serving != "":
		return serving
	case s.members.Holds(node):
		return ""
	default:
		return noReplica
	}
}

// noReplica stands for "no ready replica holds the node": the node is
// refused with 503, and its endpoint reads from kube-apiserver until a
// replica that holds it is ready.
const noReplica = "\x00none"

// owner is who serves the node of r's caller, when it is another replica
// (elsewhere), or "": not a node, or this replica.
func (s *shardRouter) owner(r *http.Request) (node, owner string) {
	u, ok := request.UserFrom(r.Context())
	if !ok {
		return "", ""
	}
	node, isNode := authorizer.NodeName(u)
	if !isNode || node == "" {
		return "", ""
	}
	return node, s.elsewhere(node)
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
	if owner == noReplica {
		shardRouting.WithLabelValues(kind, routeUnserved).Inc()
		writeStatus(w, &metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status:   metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable,
			Message: fmt.Sprintf("no hub replica that holds node %q is ready", node),
		})
		return true
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
	writeStatus(w, &st)
	return true
}

// writeStatus answers with st as kube-apiserver answers with a Status.
func writeStatus(w http.ResponseWriter, st *metav1.Status) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_ = json.NewEncoder(w).Encode(st)
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

// moved ends, spread over moveSpread, the connections of the nodes
// another replica serves now (a new table, or the owner ready again).
// Each is checked again at its turn: a node given back meanwhile stays.
func (s *shardRouter) moved() {
	var leaving []*nodeConn
	s.mu.Lock()
	for c := range s.conns {
		if o := s.elsewhere(c.node); o != "" {
			leaving = append(leaving, c)
		}
	}
	s.mu.Unlock()
	if len(leaving) == 0 {
		return
	}
	if s.bookmark != nil {
		// Each moved view resumes at the other replica from its last
		// bookmark. Views are bookmarked about a minute apart when
		// nothing of theirs changes, and a replica that has just joined
		// has no change log from before its start: a position older
		// than that costs the node its view afresh. Bookmarked now,
		// every moved view's position is this replica's current one.
		s.bookmark()
	}
	klog.InfoS("Ending the connections of nodes another replica now serves", "connections", len(leaving), "over", s.moveSpread)
	go func() {
		pause := s.moveSpread / time.Duration(len(leaving))
		for i, c := range leaving {
			if i > 0 {
				time.Sleep(pause)
			}
			owner := s.elsewhere(c.node)
			if owner == "" {
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
