package watchmux

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of kube-apiserver's protobuf encoding that the session
// reads (k8s.io/apimachinery runtime.Unknown and meta/v1 ObjectMeta; every
// API object has its ObjectMeta as field 1, as go-to-protobuf numbers the
// fields of a type in order).
const (
	unknownRaw               = 2  // runtime.Unknown.raw: the object
	objectMetadata           = 1  // <object>.metadata
	metaResourceVersion      = 6  // ObjectMeta.resourceVersion
	metaAnnotations          = 12 // ObjectMeta.annotations, map entries
	mapEntryKey, mapEntryVal = 1, 2
)

// protobufMeta reads of a protobuf-encoded object what the session needs,
// as meta does of a JSON one, without decoding the rest: it walks the
// few fields on the way and skips the others whole.
func protobufMeta(b []byte) (meta, error) {
	var m meta
	if len(b) < len(protobufMagic) || string(b[:len(protobufMagic)]) != string(protobufMagic) {
		return m, errors.New("not a protobuf object: no k8s magic")
	}
	raw, err := field(b[len(protobufMagic):], unknownRaw)
	if err != nil {
		return m, fmt.Errorf("runtime.Unknown: %w", err)
	}
	om, err := field(raw, objectMetadata)
	if err != nil {
		return m, fmt.Errorf("object: %w", err)
	}
	for len(om) > 0 {
		num, value, n := nextBytesField(om)
		if n < 0 {
			return m, fmt.Errorf("metadata: %w", protowire.ParseError(n))
		}
		om = om[n:]
		switch num {
		case metaResourceVersion:
			m.Metadata.ResourceVersion = string(value)
		case metaAnnotations:
			k, _ := field(value, mapEntryKey)
			v, _ := field(value, mapEntryVal)
			if m.Metadata.Annotations == nil {
				m.Metadata.Annotations = map[string]string{}
			}
			m.Metadata.Annotations[string(k)] = string(v)
		}
	}
	return m, nil
}

// field is the last length-delimited field num of message b (the value
// protobuf decoders keep), or nil if b has none.
func field(b []byte, num protowire.Number) ([]byte, error) {
	var out []byte
	for len(b) > 0 {
		got, value, n := nextBytesField(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		if got == num {
			out = value
		}
		b = b[n:]
	}
	return out, nil
}

// nextBytesField reads b's first field: its number, its value if it is
// length-delimited (nil otherwise), and its length in b (negative on
// malformed input, as protowire reports it).
func nextBytesField(b []byte) (protowire.Number, []byte, int) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, nil, n
	}
	if typ == protowire.BytesType {
		v, m := protowire.ConsumeBytes(b[n:])
		if m < 0 {
			return 0, nil, m
		}
		return num, v, n + m
	}
	m := protowire.ConsumeFieldValue(num, typ, b[n:])
	if m < 0 {
		return 0, nil, m
	}
	return num, nil, n + m
}
