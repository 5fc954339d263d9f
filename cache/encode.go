package cache

import (
	"bytes"
	"encoding/json"
	"fmt"

	lru "github.com/hashicorp/golang-lru/v2"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/component-base/metrics"
)

// Encoder serializes object versions to JSON, or to protobuf for watch
// channels that ask for it, once per encoding whatever the number of
// readers: a bulk get of kube-root-ca.crt by 5,000 nodes encodes it once.
//
// Entries are keyed by (type, namespace, name, resourceVersion, encoding),
// so a new version never finds an old one's bytes, and nothing has to be
// invalidated: the store's writer never touches this cache (its lock is
// the readers' alone), and versions no one reads age out. An object read
// in both encodings takes two entries.
type Encoder struct {
	lru          *lru.Cache[encodedKey, []byte]
	hits, misses metrics.CounterMetric
}

type encodedKey struct {
	kind, namespace, name string
	rv                    uint64
	protobuf              bool
}

// NewEncoder holds up to entries encoded versions.
func NewEncoder(entries int) (*Encoder, error) {
	c, err := lru.NewWithEvict[encodedKey, []byte](entries, func(encodedKey, []byte) { encodedEntries.Dec() })
	if err != nil {
		return nil, fmt.Errorf("encoded-object cache of %d entries: %w", entries, err)
	}
	RegisterMetrics()
	return &Encoder{lru: c, hits: encodedLookups.WithLabelValues("hit"), misses: encodedLookups.WithLabelValues("miss")}, nil
}

// Encode returns o as JSON with apiVersion and kind, as kube-apiserver
// sends an object in a watch event. The bytes are shared: callers must
// not modify them.
func (e *Encoder) Encode(s *Store, o *Object) ([]byte, error) {
	return e.encode(s, o, false, true, encodeObject)
}

// EncodeProtobuf returns o as kube-apiserver encodes an object in
// protobuf: the "k8s\x00" magic, then a runtime.Unknown carrying
// apiVersion, kind and the object. The bytes are shared: callers must not
// modify them.
//
// An object kept as bytes is those bytes: no encoding, no entry; its
// segments joined (one copy) where it has more than one.
func (e *Encoder) EncodeProtobuf(s *Store, o *Object) ([]byte, error) {
	if !o.raw.empty() {
		return o.raw.join(), nil
	}
	return e.encode(s, o, true, true, encodeProtobuf)
}

// EncodeProtobufUncached is EncodeProtobuf for an object version that
// few readers will ask for, as EncodeUncached is Encode's: bytes kept are
// returned as they are, an object kept decoded is encoded for this caller
// alone unless the LRU has it.
func (e *Encoder) EncodeProtobufUncached(s *Store, o *Object) ([]byte, error) {
	if !o.raw.empty() {
		return o.raw.join(), nil
	}
	return e.encode(s, o, true, false, encodeProtobuf)
}

// EncodeUncached is Encode for an object version that few readers will
// ask for (a pod, which only its node's view sends): the LRU's bytes if a
// reader put them there, or else bytes encoded for this caller alone and
// not kept, which go once the caller has written them. An entry for each
// such version would hold its bytes, and an entry's keys, until as many
// newer versions push it out, and in a full LRU push out bytes that many
// readers share.
func (e *Encoder) EncodeUncached(s *Store, o *Object) ([]byte, error) {
	return e.encode(s, o, false, false, encodeObject)
}

// EncodeUncachedTyped is EncodeUncached for a caller that holds o
// decoded already (typed, from o.Typed), which spares a decode of an
// object kept as bytes.
func (e *Encoder) EncodeUncachedTyped(s *Store, o *Object, typed runtime.Object) ([]byte, error) {
	return e.encode(s, o, false, false, func(s *Store, o *Object) ([]byte, error) { return marshalJSON(s, o, typed) })
}

// encode looks o up in the LRU, and encodes it on a miss, keeping the
// bytes there if keep.
func (e *Encoder) encode(s *Store, o *Object, protobuf, keep bool, encode func(*Store, *Object) ([]byte, error)) ([]byte, error) {
	key := encodedKey{kind: s.Kind, namespace: o.Namespace, name: o.Name, rv: o.RV, protobuf: protobuf}
	if b, ok := e.lru.Get(key); ok {
		e.hits.Inc()
		return b, nil
	}
	e.misses.Inc()
	b, err := encode(s, o)
	if err != nil || !keep {
		return b, err
	}
	if found, _ := e.lru.ContainsOrAdd(key, b); !found {
		encodedEntries.Inc() // an eviction, if any, took one off
	}
	return b, nil
}

// encodeObject marshals o's typed object, whose type meta the store
// cleared (an object kept as bytes is decoded for it, once per version
// the LRU keeps), and splices apiVersion and kind in front: setting them
// on the shared object instead would race with every other reader.
func encodeObject(s *Store, o *Object) ([]byte, error) {
	obj, err := o.Typed()
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", s.Kind, err)
	}
	return marshalJSON(s, o, obj)
}

// marshalJSON is encodeObject for obj, o's typed object.
func marshalJSON(s *Store, o *Object, obj runtime.Object) ([]byte, error) {
	body, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encode %s %s/%s: %w", s.Kind, o.Namespace, o.Name, err)
	}
	var b bytes.Buffer
	b.Grow(len(body) + 64)
	b.WriteString(`{"kind":"`)
	b.WriteString(s.Kind)
	b.WriteString(`","apiVersion":"`)
	b.WriteString(s.Resource.GroupVersion().String())
	b.WriteByte('"')
	if len(body) > 2 {
		b.WriteByte(',')
	}
	b.Write(body[1:])
	return b.Bytes(), nil
}

// encodeProtobuf wraps o's typed object in the runtime.Unknown that
// carries its apiVersion and kind, as kube-apiserver's protobuf serializer
// does for an object (its Unknown path writes the same bytes as its typed
// one); the type meta goes on the envelope rather than on the shared
// object, as in encodeObject.
func encodeProtobuf(s *Store, o *Object) ([]byte, error) {
	b, err := protobufOf(s.Resource.GroupVersion().String(), s.Kind, o.obj)
	if err != nil {
		return nil, fmt.Errorf("encode %s/%s: %w", o.Namespace, o.Name, err)
	}
	return b, nil
}

// protobufEnvelope writes a runtime.Unknown behind the magic; it needs no
// scheme for that.
var protobufEnvelope = protobuf.NewSerializer(nil, nil)
