package nodecopy

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/nodeproxy/nodeproxy/internal/kubeproto"
)

// The hub sends a view that asks for it (the endpoint's) in
// kube-apiserver's protobuf (kubeproto has the envelope's layout). The
// copy keeps such an object as it came, and reads its head from the few
// fields below without decoding the rest; the field numbers are part of
// the API's compatibility promise.
const (
	podSpecNodeName      = 10 // PodSpec.nodeName
	serviceSpecClusterIP = 3  // ServiceSpec.clusterIP
	serviceSpecType      = 4  // ServiceSpec.type
)

// IsProtobuf says whether raw, an object of the copy, is in
// kube-apiserver's protobuf (else it is JSON): no JSON document begins
// with its magic.
func IsProtobuf(raw []byte) bool { return kubeproto.IsProtobuf(raw) }

// protobufHead reads h from b, an object in kube-apiserver's protobuf.
func protobufHead(b []byte) (head, error) {
	var h head
	tm, raw, err := kubeproto.Envelope(b)
	if err != nil {
		return h, err
	}
	if tm.Num != 0 {
		err := kubeproto.EachBytes(tm.Value(b), func(num protowire.Number, v []byte) error {
			switch num {
			case kubeproto.TypeMetaAPIVersion:
				h.APIVersion = string(v)
			case kubeproto.TypeMetaKind:
				h.Kind = string(v)
			}
			return nil
		})
		if err != nil {
			return h, fmt.Errorf("runtime.Unknown's typeMeta: %w", err)
		}
	}
	err = kubeproto.EachBytes(raw.Value(b), func(num protowire.Number, v []byte) error {
		switch num {
		case kubeproto.ObjectMetadata:
			return readMeta(&h, v)
		case kubeproto.ObjectSpec:
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
	return kubeproto.EachBytes(b, func(num protowire.Number, v []byte) error {
		switch num {
		case kubeproto.MetaName:
			h.Metadata.Name = string(v)
		case kubeproto.MetaNamespace:
			h.Metadata.Namespace = string(v)
		case kubeproto.MetaResourceVersion:
			h.Metadata.ResourceVersion = string(v)
		case kubeproto.MetaLabels:
			k, val, err := kubeproto.MapEntry(v)
			if err != nil {
				return fmt.Errorf("labels: %w", err)
			}
			if h.Metadata.Labels == nil {
				h.Metadata.Labels = map[string]string{}
			}
			h.Metadata.Labels[string(k)] = string(val)
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
	return kubeproto.EachBytes(b, func(num protowire.Number, v []byte) error {
		if p, ok := want[num]; ok {
			*p = string(v)
		}
		return nil
	})
}

// protobufWithResourceVersion is b, an object in kube-apiserver's
// protobuf, with metadata.resourceVersion rv: the three messages on the
// way rebuilt around the new field, the rest of the bytes as they were.
func protobufWithResourceVersion(b []byte, rv string) ([]byte, error) {
	if !IsProtobuf(b) {
		return nil, kubeproto.ErrNotProtobuf
	}
	envelope, err := replaceField(b[len(kubeproto.Magic):], kubeproto.UnknownRaw, func(raw []byte) ([]byte, error) {
		return replaceField(raw, kubeproto.ObjectMetadata, func(meta []byte) ([]byte, error) {
			return replaceField(meta, kubeproto.MetaResourceVersion, func([]byte) ([]byte, error) { return []byte(rv), nil })
		})
	})
	if err != nil {
		return nil, err
	}
	return append(append(make([]byte, 0, len(kubeproto.Magic)+len(envelope)), kubeproto.Magic...), envelope...), nil
}

// replaceField is message b with its length-delimited field num's value
// v replaced by f(v), in place of the first occurrence (appended if
// there is none); later occurrences, which a decoder would merge or let
// win, are dropped.
func replaceField(b []byte, num protowire.Number, f func([]byte) ([]byte, error)) ([]byte, error) {
	out := make([]byte, 0, len(b)+16)
	done := false
	for at := 0; at < len(b); {
		fld, err := kubeproto.Next(b, at)
		if err != nil {
			return nil, err
		}
		at = fld.End
		if fld.Num != num || fld.Type != protowire.BytesType {
			out = append(out, b[fld.Tag:fld.End]...)
			continue
		}
		if done {
			continue
		}
		nv, err := f(fld.Value(b))
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
