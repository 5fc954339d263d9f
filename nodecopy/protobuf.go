package nodecopy

import (
	"bytes"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// The hub sends a view that asks for it (the endpoint's) in
// kube-apiserver's protobuf: the "k8s\x00" magic, then a runtime.Unknown
// (typeMeta 1: apiVersion 1, kind 2; raw 2: the object). The copy keeps
// such an object as it came, and reads its head from the few fields
// below without decoding the rest: every API object has its ObjectMeta
// as field 1 and its spec as field 2 (go-to-protobuf numbers a type's
// fields in order), and the field numbers are part of the API's
// compatibility promise.
const (
	unknownTypeMeta, unknownRaw = 1, 2
	typeMetaAPIVersion          = 1
	typeMetaKind                = 2
	objectMetadata, objectSpec  = 1, 2
	metaName                    = 1
	metaNamespace               = 3
	metaResourceVersion         = 6
	metaLabels                  = 11
	mapEntryKey, mapEntryValue  = 1, 2
	podSpecNodeName             = 10 // PodSpec.nodeName
	serviceSpecClusterIP        = 3  // ServiceSpec.clusterIP
	serviceSpecType             = 4  // ServiceSpec.type
)

// protobufMagic begins every object kube-apiserver encodes in protobuf;
// no JSON document can begin with it. Never modified.
var protobufMagic = []byte("k8s\x00")

// IsProtobuf says whether raw, an object of the copy, is in
// kube-apiserver's protobuf (else it is JSON).
func IsProtobuf(raw []byte) bool { return bytes.HasPrefix(raw, protobufMagic) }

// protobufHead reads h from b, an object in kube-apiserver's protobuf.
func protobufHead(b []byte) (head, error) {
	var h head
	if !IsProtobuf(b) {
		return h, errors.New("no protobuf magic")
	}
	var raw []byte
	err := eachField(b[len(protobufMagic):], func(num protowire.Number, v []byte) error {
		switch num {
		case unknownTypeMeta:
			return eachField(v, func(num protowire.Number, v []byte) error {
				switch num {
				case typeMetaAPIVersion:
					h.APIVersion = string(v)
				case typeMetaKind:
					h.Kind = string(v)
				}
				return nil
			})
		case unknownRaw:
			raw = v
		}
		return nil
	})
	if err != nil {
		return h, fmt.Errorf("runtime.Unknown: %w", err)
	}
	err = eachField(raw, func(num protowire.Number, v []byte) error {
		switch num {
		case objectMetadata:
			return readMeta(&h, v)
		case objectSpec:
			return readSpec(&h, v)
		}
		return nil
	})
	if err != nil {
		return h, fmt.Errorf("%s: %w", h.Kind, err)
	}
	return h, nil
}

func readMeta(h *head, b []byte) error {
	return eachField(b, func(num protowire.Number, v []byte) error {
		switch num {
		case metaName:
			h.Metadata.Name = string(v)
		case metaNamespace:
			h.Metadata.Namespace = string(v)
		case metaResourceVersion:
			h.Metadata.ResourceVersion = string(v)
		case metaLabels:
			var k, val string
			if err := eachField(v, func(num protowire.Number, v []byte) error {
				switch num {
				case mapEntryKey:
					k = string(v)
				case mapEntryValue:
					val = string(v)
				}
				return nil
			}); err != nil {
				return fmt.Errorf("labels: %w", err)
			}
			if h.Metadata.Labels == nil {
				h.Metadata.Labels = map[string]string{}
			}
			h.Metadata.Labels[k] = val
		}
		return nil
	})
}

// readSpec reads the spec fields the copy selects on: a pod's node, a
// service's cluster IP and type. The kind is known by then: typeMeta
// comes before raw in every Unknown kube-apiserver writes.
func readSpec(h *head, b []byte) error {
	var want map[protowire.Number]*string
	switch h.Kind {
	case "Pod":
		want = map[protowire.Number]*string{podSpecNodeName: &h.Spec.NodeName}
	case "Service":
		want = map[protowire.Number]*string{serviceSpecClusterIP: &h.Spec.ClusterIP, serviceSpecType: &h.Spec.Type}
	default:
		return nil
	}
	return eachField(b, func(num protowire.Number, v []byte) error {
		if p, ok := want[num]; ok {
			*p = string(v)
		}
		return nil
	})
}

// eachField calls f with each length-delimited field of message b, in
// order, and skips the others.
func eachField(b []byte, f func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			b = b[m:]
			continue
		}
		v, m := protowire.ConsumeBytes(b)
		if m < 0 {
			return protowire.ParseError(m)
		}
		b = b[m:]
		if err := f(num, v); err != nil {
			return err
		}
	}
	return nil
}

// protobufWithResourceVersion is b, an object in kube-apiserver's
// protobuf, with metadata.resourceVersion rv: the three messages on the
// way rebuilt around the new field, the rest of the bytes as they were.
func protobufWithResourceVersion(b []byte, rv string) ([]byte, error) {
	if !IsProtobuf(b) {
		return nil, errors.New("no protobuf magic")
	}
	var err error
	envelope, err := replaceField(b[len(protobufMagic):], unknownRaw, func(raw []byte) ([]byte, error) {
		return replaceField(raw, objectMetadata, func(meta []byte) ([]byte, error) {
			return replaceField(meta, metaResourceVersion, func([]byte) ([]byte, error) { return []byte(rv), nil })
		})
	})
	if err != nil {
		return nil, err
	}
	return append(append(make([]byte, 0, len(protobufMagic)+len(envelope)), protobufMagic...), envelope...), nil
}

// replaceField is message b with its length-delimited field num's value
// v replaced by f(v), in place of the first occurrence (appended if
// there is none); later occurrences, which a decoder would merge or let
// win, are dropped.
func replaceField(b []byte, num protowire.Number, f func([]byte) ([]byte, error)) ([]byte, error) {
	out := make([]byte, 0, len(b)+16)
	done := false
	for len(b) > 0 {
		got, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(got, typ, b[n:])
		if m < 0 {
			return nil, protowire.ParseError(m)
		}
		whole := b[:n+m]
		b = b[n+m:]
		if got != num || typ != protowire.BytesType {
			out = append(out, whole...)
			continue
		}
		if done {
			continue
		}
		v, _ := protowire.ConsumeBytes(whole[n:])
		nv, err := f(v)
		if err != nil {
			return nil, err
		}
		out = protowire.AppendBytes(protowire.AppendTag(out, num, protowire.BytesType), nv)
		done = true
	}
	if !done {
		nv, err := f(nil)
		if err != nil {
			return nil, err
		}
		out = protowire.AppendBytes(protowire.AppendTag(out, num, protowire.BytesType), nv)
	}
	return out, nil
}
