package kubeproto

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Magic begins every object and list kube-apiserver writes in protobuf;
// no JSON document begins with it.
const Magic = "k8s\x00"

// The fields of the runtime.Unknown after the magic, and of its typeMeta.
const (
	UnknownTypeMeta        protowire.Number = 1
	UnknownRaw             protowire.Number = 2 // the object's own message
	UnknownContentEncoding protowire.Number = 3
	UnknownContentType     protowire.Number = 4

	TypeMetaAPIVersion protowire.Number = 1
	TypeMetaKind       protowire.Number = 2
)

// ErrNotProtobuf: bytes that do not begin with Magic.
var ErrNotProtobuf = errors.New("not kube-apiserver's protobuf: no k8s magic")

// IsProtobuf says whether b begins with Magic.
func IsProtobuf(b []byte) bool {
	return len(b) >= len(Magic) && string(b[:len(Magic)]) == Magic
}

// Envelope reads whole, an object as kube-apiserver writes it in protobuf
// (magic included): its runtime.Unknown's typeMeta and raw fields, by
// offsets in whole, each the last of its number as a decoder keeps it,
// and the zero Field (Num 0) where whole has none.
func Envelope(whole []byte) (typeMeta, raw Field, err error) {
	if !IsProtobuf(whole) {
		return Field{}, Field{}, ErrNotProtobuf
	}
	for at := len(Magic); at < len(whole); {
		f, err := Next(whole, at)
		if err != nil {
			return Field{}, Field{}, fmt.Errorf("runtime.Unknown: %w", err)
		}
		if f.Type == protowire.BytesType {
			switch f.Num {
			case UnknownTypeMeta:
				typeMeta = f
			case UnknownRaw:
				raw = f
			}
		}
		at = f.End
	}
	return typeMeta, raw, nil
}
