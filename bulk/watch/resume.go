package watch

import (
	"encoding/json"
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/nodeproxy/nodeproxy/cache"
)

// How a channel resumed from a resourceVersion joined its dispatcher.
const (
	// resumeFromLog: from the change log (or ahead of it, from a version
	// kube-apiserver vouched for).
	resumeFromLog = "log"
	// resumeFromState: older than the change log, on a channel naming one
	// object: that object's current state, then the changes.
	resumeFromState = "current_state"
	// resumeExpired: older than the change log: ERROR 410.
	resumeExpired = "expired"
	// resumeGone: the channel closed before it joined.
	resumeGone = "gone"
)

// resumeFromStateLocked brings a channel that names one object, resumed
// from a version (from) older than the change log reaches (a replica
// started after the client saw from), to the object's state in snap with
// at most one event: what a relist would tell the client, without
// the 410 and the relist. The client holds the object as it was at
// from, or nothing if the object was not selected then:
//
//   - selected, at a version <= from: unchanged since; nothing to send.
//   - selected, at a version > from: MODIFIED with the current object.
//     It was ADDED if created after from, which the hub cannot tell;
//     client-go's reflector stores either by key (store.Add and
//     store.Update both set it), and an informer calls OnAdd or OnUpdate
//     by whether it held the object, so the client ends the same.
//   - in the store but not selected (its labels), at a version > from:
//     DELETED with the current object, as a change taking it out of the
//     selection; at a version <= from it was not selected at from either:
//     nothing.
//   - not in the store: DELETED with the object's identity (kind,
//     namespace, name, and snap's resourceVersion; its last state is
//     gone): it may have been deleted after from. A client that never
//     held it deletes nothing: client-go's stores (the kubelet's
//     watch-based secret and configmap managers keep one per object)
//     ignore a delete of a key they lack, and DeltaFIFO drops it.
//
// The channel then follows the log from snap's version: every later
// change, none it has been told of.
func (d *dispatcher) resumeFromStateLocked(s *stream, from uint64, snap *cache.Snapshot) error {
	q := s.q
	namespace, name := q.Namespace(), q.Name()
	o, ok := snap.Get(namespace, name)
	var (
		typ apiwatch.EventType
		b   []byte
		err error
	)
	switch {
	case ok && o.RV <= from:
	case ok && q.Matches(o, s.graph):
		typ = apiwatch.Modified
		b, err = s.encode(d.store, o)
	case ok:
		typ = apiwatch.Deleted
		b, err = s.encode(d.store, o)
	default:
		typ = apiwatch.Deleted
		b, err = identityObject(d.store, namespace, name, snap.RV)
	}
	if err != nil {
		return fmt.Errorf("resume %s %s/%s from its current state: %w", d.store.Resource.Resource, namespace, name, err)
	}
	s.after = snap.RV
	klog.V(4).InfoS("Resumed a channel from its object's current state", "resource", d.store.Resource.Resource,
		"namespace", namespace, "name", name, "from", from, "resourceVersion", snap.RV, "event", typ)
	if typ != "" && !s.sink.Send(typ, b) {
		s.dead.Store(true)
	}
	return nil
}

// identityObject is an object of s's type that carries nothing but its
// name, namespace and resourceVersion rv: the object of a DELETED event
// whose last state nodeproxy no longer has.
func identityObject(s *cache.Store, namespace, name string, rv uint64) ([]byte, error) {
	return json.Marshal(&metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{Kind: s.Kind, APIVersion: s.Resource.GroupVersion().String()},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, ResourceVersion: strconv.FormatUint(rv, 10)},
	})
}
