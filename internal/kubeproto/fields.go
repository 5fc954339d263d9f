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

// Next is the field of message b that begins at offset at; the next one
// begins at its End. An error says where b is malformed or truncated.
func Next(b []byte, at int) (Field, error) {
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

// AppendFields appends message b's fields to dst, in order, and returns
// it; on error, dst as it was.
func AppendFields(dst []Field, b []byte) ([]Field, error) {
	out := dst
	for at := 0; at < len(b); {
		f, err := Next(b, at)
		if err != nil {
			return dst, err
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
