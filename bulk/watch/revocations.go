package watch

import (
	"net/http"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeproxy/nodeproxy/graph"
)

// revocations closes a node's channels on an object the moment the graph
// says the node no longer reaches it (its last pod using the object
// deleted or moved, a volume unbound). The graph calls observe after each
// write, with its write lock held, so the ERROR is queued before the next
// change is even applied.
type revocations struct {
	mu      sync.Mutex
	streams map[revocationKey]map[*stream]struct{} // guarded by mu
}

type revocationKey struct {
	node string
	ref  graph.ObjectRef
}

func newRevocations() *revocations {
	return &revocations{streams: map[revocationKey]map[*stream]struct{}{}}
}

func (r *revocations) add(node string, ref graph.ObjectRef, s *stream) {
	r.mu.Lock()
	defer r.mu.Unlock()
	addTo(r.streams, revocationKey{node, ref}, s)
}

func (r *revocations) remove(node string, ref graph.ObjectRef, s *stream) {
	r.mu.Lock()
	defer r.mu.Unlock()
	removeFrom(r.streams, revocationKey{node, ref}, s)
}

// observe is the graph observer. Channels are closed after mu is
// released: closing runs the channel's close callbacks, one of which
// takes mu to remove the channel.
func (r *revocations) observe(changes []graph.Change) {
	var closing []*stream
	var refs []graph.ObjectRef
	r.mu.Lock()
	for _, c := range changes {
		if c.Reachable {
			continue
		}
		for s := range r.streams[revocationKey{c.Node, c.Object}] {
			closing = append(closing, s)
			refs = append(refs, c.Object)
		}
	}
	r.mu.Unlock()
	for i, s := range closing {
		s.dead.Store(true)
		s.sink.Close(&metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
			Message: "access lost: no pod bound to this node uses " + refs[i].String() + " any more",
		})
	}
}
