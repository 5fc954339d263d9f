package cache

import (
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
)

// Lists taken in as they stream. A replica starts, and relists a type
// whose watch cannot resume, with a watch-list: client-go's reflector
// collects the initial state in a temporary store of its own and hands
// it to Replace whole, once its closing bookmark has come
// (tools/cache/reflector.go, watchList). Held decoded until then, a list
// of pods costs their decoded size, several times what the store keeps of
// them: a replica of a large cluster needed several times its steady
// heap to start, and to relist pods (docs/operations.md, "Sizing
// memory"). So a store that keeps its type as bytes is a
// TransformingStore: the reflector gives the temporary store the store's
// transformer, which takes each object in as the store keeps it (its key
// fields and its bytes, listed) the moment it arrives, and the decoded
// object is garbage before the next is decoded.
//
// What that costs: the store's handlers (the graph's) still see every
// object typed, so Replace decodes each new or changed one again, one
// at a time, for them (nodeproxy_cache_object_decodes_total); objects a
// relist finds unchanged are not decoded. A list made the other way, by
// pages (the reflector's fallback when kube-apiserver offers no
// watch-list), is still held whole by client-go's pager.

// listed is an object taken in by the transformer: what the store keeps
// of it, ready for Replace. It is a runtime.Object only so that the
// temporary store can hold and key it.
type listed struct{ o *Object }

func (l *listed) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject returns l itself: a version is immutable once made.
func (l *listed) DeepCopyObject() runtime.Object { return l }

// GetObjectMeta is what the temporary store keys l by.
func (l *listed) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: l.o.Namespace, Name: l.o.Name, UID: l.o.UID, ResourceVersion: strconv.FormatUint(l.o.RV, 10)}
}

// Transformer makes s a toolscache.TransformingStore: the transformer
// of a store that keeps its type as bytes, nil for any other (the store
// takes ownership of what the list decoded, so it costs nothing twice).
func (s *Store) Transformer() toolscache.TransformFunc {
	if !s.asBytes {
		return nil
	}
	return s.takeInListed
}

// takeInListed is obj as the store keeps it. An object it cannot take in
// so goes on as it came, and Replace takes it in, or reports why not: a
// transformer's error would leave the object out of the list.
func (s *Store) takeInListed(obj interface{}) (interface{}, error) {
	if _, ok := obj.(*listed); ok {
		return obj, nil
	}
	o, err := newObject(obj)
	if err != nil {
		return obj, nil
	}
	if s.notWanted(o) {
		// A sharded store's object of a node it does not hold: its key
		// fields alone, for Replace to turn away (held.go). Its bytes
		// are never made, and the decoded object is garbage at once.
		o.obj = nil
		return &listed{o}, nil
	}
	if err := o.keepBytes(s.apiVersion, s.Kind, s.layout, nil); err != nil {
		return obj, nil
	}
	listedAsBytes.WithLabelValues(s.Resource.Resource).Inc()
	return &listed{o}, nil
}

// dropped reports whether o was taken in as listed without its bytes or
// its object (takeInListed, of a node the store does not hold).
func (o *Object) dropped() bool { return o.obj == nil && o.raw.empty() }

// objectOf is what the store keeps of item, a list's object: taken in
// already, or now.
func objectOf(item interface{}) (*Object, error) {
	if l, ok := item.(*listed); ok {
		return l.o, nil
	}
	return newObject(item)
}

// keepListed makes o share what it holds unchanged of prev, as keep
// does, if it was taken in as it was listed (it holds its bytes, and no
// typed object); false for any other. Its typed object, for the
// handlers, is typedFor's to decode, only if they are to see it.
func (s *Store) keepListed(o, prev *Object) bool {
	if o.obj != nil || o.raw == nil {
		return false
	}
	if prev == nil {
		return true // as takeInListed made it: its keys in its own bytes
	}
	o.shareBytes(prev)
	if s.layout == metadataRest {
		// shareBytes took prev's keys, in prev's bytes: point them at
		// o's own again, as keepBytes does after sharing.
		o.keysInBytes(o.raw.join())
	}
	return true
}

// typedFor is o's typed object for the handlers: typed, unless o was
// taken in as it was listed, then decoded now.
func (s *Store) typedFor(o *Object, typed runtime.Object) runtime.Object {
	if typed != nil {
		return typed
	}
	return s.typedLocked(o)
}
