package kubeproto

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// A Field is one field of a message, by offsets in the bytes it was read
// from (which Value takes back), so that a caller can cut or copy the
// bytes around it: where its tag begins, and where its value begins and
// ends (for a length-delimited field, the bytes after its length).
type Field struct {
	Num             protowire.Number
	Type            protowire.Type
	Tag, Start, End int
}

// Value is f's value in b, the bytes f was read from.
func (f Field) Value(b []byte) []byte { return b[f.Start:f.End] }

// Next is the field of message b that begins at offset at (0 <= at <=
// len(b)); the next one begins at its End. An error says where b is
// malformed or truncated.
//
// Most fields of an API object have a tag of one or two bytes (numbers
// 1 to 2047) and are length-delimited with a length of one or two bytes
// (under 16 KiB), or a varint of one byte (a bool, a small number): Next
// reads those inline, and the rest, and anything malformed, with
// protowire (FuzzFields holds the two to the same answers). The reads it
// serves run at every write the cache keeps as bytes and at every event
// the endpoint copies or the bulk watch client reads, where calls into
// protowire for the tag and again for the length cost more than the walk
// itself (BenchmarkNext).
func Next(b []byte, at int) (Field, error) {
	if at < 0 || at >= len(b) {
		return consume(b, at)
	}
	key, start := int(b[at]), at+1
	if key >= 0x80 {
		if start >= len(b) || b[start] >= 0x80 {
			return consume(b, at)
		}
		key, start = key&0x7f|int(b[start])<<7, start+1
	}
	num, typ := protowire.Number(key>>3), protowire.Type(key&7)
	if num < 1 || start >= len(b) {
		return consume(b, at)
	}
	switch l := int(b[start]); typ {
	case protowire.BytesType:
		start++
		if l >= 0x80 {
			if start >= len(b) || b[start] >= 0x80 {
				return consume(b, at)
			}
			l, start = l&0x7f|int(b[start])<<7, start+1
		}
		if start+l <= len(b) {
			return Field{Num: num, Type: typ, Tag: at, Start: start, End: start + l}, nil
		}
	case protowire.VarintType:
		if l < 0x80 {
			return Field{Num: num, Type: typ, Tag: at, Start: start, End: start + 1}, nil
		}
	}
	return consume(b, at)
}

// consume is Next for any field, with protowire.
func consume(b []byte, at int) (Field, error) {
	if at < 0 || at > len(b) {
		return Field{}, fmt.Errorf("field at byte %d of %d", at, len(b))
	}
	num, typ, n := protowire.ConsumeTag(b[at:])
	if n < 0 {
		return Field{}, fmt.Errorf("tag at byte %d: %w", at, protowire.ParseError(n))
	}
	f := Field{Num: num, Type: typ, Tag: at, Start: at + n}
	if typ == protowire.BytesType {
		v, m := protowire.ConsumeBytes(b[f.Start:])
		if m < 0 {
			return Field{}, fmt.Errorf("field %d at byte %d: %w", num, at, protowire.ParseError(m))
		}
		f.End = f.Start + m
		f.Start = f.End - len(v)
		return f, nil
	}
	m := protowire.ConsumeFieldValue(num, typ, b[f.Start:])
	if m < 0 {
		return Field{}, fmt.Errorf("field %d at byte %d: %w", num, at, protowire.ParseError(m))
	}
	f.End = f.Start + m
	return f, nil
}

// Fields lists message b's fields in order.
func Fields(b []byte) ([]Field, error) {
	// A local slice rather than one a caller passes in: the compiler
	// then starts it on the stack and moves it to the heap once, at the
	// return, which spares the first of append's allocations.
	var out []Field
	for at := 0; at < len(b); {
		f, err := Next(b, at)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
		at = f.End
	}
	return out, nil
}

// Bytes is the value of message b's last length-delimited field num, the
// one a protobuf decoder keeps, or nil if b has none.
func Bytes(b []byte, num protowire.Number) ([]byte, error) {
	var out []byte
	for at := 0; at < len(b); {
		f, err := Next(b, at)
		if err != nil {
			return nil, err
		}
		if f.Num == num && f.Type == protowire.BytesType {
			out = f.Value(b)
		}
		at = f.End
	}
	return out, nil
}

// EachBytes calls fn with each length-delimited field of message b, in
// order, skipping the others, and stops at fn's first error.
func EachBytes(b []byte, fn func(num protowire.Number, v []byte) error) error {
	for at := 0; at < len(b); {
		f, err := Next(b, at)
		if err != nil {
			return err
		}
		at = f.End
		if f.Type != protowire.BytesType {
			continue
		}
		if err := fn(f.Num, f.Value(b)); err != nil {
			return err
		}
	}
	return nil
}

// MapEntry is the key and value of b, an entry of a map<string, string>
// field (labels, annotations): each nil where b has none.
func MapEntry(b []byte) (key, value []byte, err error) {
	for at := 0; at < len(b); {
		f, err := Next(b, at)
		if err != nil {
			return nil, nil, err
		}
		if f.Type == protowire.BytesType {
			switch f.Num {
			case MapEntryKey:
				key = f.Value(b)
			case MapEntryValue:
				value = f.Value(b)
			}
		}
		at = f.End
	}
	return key, value, nil
}
