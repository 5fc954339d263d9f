package cache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// segments are an object's bytes (protobufOf's) in up to three pieces,
// each its own allocation, whose concatenation is the whole: up to the
// end of the object's first top-level field (the envelope's head and
// metadata), its second (spec), and the rest (status and the envelope's
// tail). A version takes each piece of the version before it that is
// equal to its own (shareBytes), and a kubelet's status write changes
// metadata (resourceVersion) and status, never a pod's spec: so the
// change log's history of a pod costs its status writes, not a whole pod
// each (docs/benchmarks.md, "The hub's heap per cached object").
//
// Where the bytes do not have that shape (fewer than three fields, or
// out of order) the first segment holds them whole. An Object points at
// its segments, so that one kept decoded pays a pointer for them.
type segments [3][]byte

// splitSegments cuts whole into segments, copying each so that sharing
// one keeps nothing else of whole alive.
func splitSegments(whole []byte) *segments {
	at, ok := cutPoints(whole)
	if !ok {
		return &segments{whole}
	}
	s := &segments{}
	from := 0
	for i, to := range []int{at[0], at[1], len(whole)} {
		s[i] = bytes.Clone(whole[from:to])
		from = to
	}
	return s
}

// cutPoints are where the object's second and third top-level fields
// begin in whole.
func cutPoints(whole []byte) ([2]int, bool) {
	raw, ok := envelopeRaw(whole)
	if !ok {
		return [2]int{}, false
	}
	fs, err := topLevelFields(whole[raw.start:raw.end])
	if err != nil || len(fs) < 3 || fs[0].num != 1 || fs[1].num != 2 || fs[2].num != 3 {
		return [2]int{}, false
	}
	return [2]int{raw.start + fs[1].tag, raw.start + fs[2].tag}, true
}

// envelopeRaw is where the object's own bytes (the runtime.Unknown's
// Raw, field 2) are in whole.
func envelopeRaw(whole []byte) (protoField, bool) {
	if !bytes.HasPrefix(whole, protobufMagic) {
		return protoField{}, false
	}
	fs, err := topLevelFields(whole[len(protobufMagic):])
	if err != nil {
		return protoField{}, false
	}
	for _, f := range fs {
		if f.num == 2 {
			f.start += len(protobufMagic)
			f.end += len(protobufMagic)
			return f, true
		}
	}
	return protoField{}, false
}

// join is the whole: the first segment itself when it is all, else a new
// copy the caller owns; nil for no segments.
func (s *segments) join() []byte {
	if s == nil {
		return nil
	}
	if s[1] == nil && s[2] == nil {
		return s[0]
	}
	b := make([]byte, 0, len(s[0])+len(s[1])+len(s[2]))
	return append(append(append(b, s[0]...), s[1]...), s[2]...)
}

// empty says whether the object is kept decoded (it has no segments).
func (s *segments) empty() bool { return s == nil || s[0] == nil }

// share makes each segment equal to prev's (if any) be prev's.
func (s *segments) share(prev *segments) {
	if prev == nil {
		return
	}
	for i := range s {
		if s[i] != nil && bytes.Equal(s[i], prev[i]) {
			s[i] = prev[i]
		}
	}
}

// protoField is one top-level field of a protobuf message: its number,
// where its tag begins, and where its value begins and ends (for a
// length-delimited field, the bytes after the length).
type protoField struct {
	num             uint64
	tag, start, end int
}

// topLevelFields lists b's top-level fields in order.
func topLevelFields(b []byte) ([]protoField, error) {
	var out []protoField
	for i := 0; i < len(b); {
		key, n := binary.Uvarint(b[i:])
		if n <= 0 {
			return nil, errors.New("truncated protobuf tag")
		}
		f := protoField{num: key >> 3, tag: i, start: i + n}
		switch key & 7 {
		case 0: // varint
			_, m := binary.Uvarint(b[f.start:])
			if m <= 0 {
				return nil, errors.New("truncated protobuf varint")
			}
			f.end = f.start + m
		case 1: // 64 bits
			f.end = f.start + 8
		case 2: // length-delimited
			l, m := binary.Uvarint(b[f.start:])
			if m <= 0 || l > uint64(len(b)) {
				return nil, errors.New("truncated protobuf length")
			}
			f.start += m
			f.end = f.start + int(l)
		case 5: // 32 bits
			f.end = f.start + 4
		default:
			return nil, fmt.Errorf("protobuf wire type %d", key&7)
		}
		if f.end > len(b) {
			return nil, errors.New("truncated protobuf field")
		}
		out = append(out, f)
		i = f.end
	}
	return out, nil
}

// sameSpec says whether s and other are in three segments and share
// their second (a pod's spec) as one allocation: share made it so
// because the bytes were equal.
func (s *segments) sameSpec(other *segments) bool {
	if s.empty() || other.empty() || len(s[1]) == 0 || len(s[1]) != len(other[1]) {
		return false
	}
	return &s[1][0] == &other[1][0]
}
