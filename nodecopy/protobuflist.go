package nodecopy

import (
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/nodeproxy/nodeproxy/internal/kubeproto"
)

// The list kube-apiserver writes in protobuf: the magic, then a
// runtime.Unknown whose raw is a <Kind>List message: its ListMeta as
// field 1 (resourceVersion 2) and its items as field 2, each an object's
// message (what its own Unknown's raw holds).
const (
	listMetadata, listItems = 1, 2
	listMetaSelfLink        = 1
	listMetaResourceVersion = 2
	listMetaContinue        = 3
)

// ProtobufList is the list of kind (a "PodList") and apiVersion holding
// objs at rv, as kube-apiserver encodes one in protobuf, byte for byte,
// made from the objects' own bytes without decoding any: each item is
// the object's message as the copy keeps it. objs must all be kept as protobuf
// (IsProtobuf), or it fails.
func ProtobufList(apiVersion, kind string, rv uint64, objs []*Object) ([]byte, error) {
	size := 0
	items := make([][]byte, len(objs))
	for i, o := range objs {
		if !IsProtobuf(o.Raw) {
			return nil, fmt.Errorf("%s/%s: %w", o.Namespace, o.Name, errNotProtobuf)
		}
		_, f, err := kubeproto.Envelope(o.Raw)
		if err != nil || f.Num == 0 {
			return nil, fmt.Errorf("%s/%s: no object in its runtime.Unknown: %v", o.Namespace, o.Name, err)
		}
		raw := f.Value(o.Raw)
		items[i] = raw
		size += len(raw) + 2*protowire.SizeVarint(uint64(len(raw)))
	}
	// The empty strings too, as kube-apiserver's generated marshallers
	// write them: the list is then its bytes exactly.
	var meta []byte
	meta = appendString(meta, listMetaSelfLink, "")
	meta = appendString(meta, listMetaResourceVersion, strconv.FormatUint(rv, 10))
	meta = appendString(meta, listMetaContinue, "")
	list := make([]byte, 0, size+len(meta)+8)
	list = protowire.AppendTag(list, listMetadata, protowire.BytesType)
	list = protowire.AppendBytes(list, meta)
	for _, item := range items {
		list = protowire.AppendTag(list, listItems, protowire.BytesType)
		list = protowire.AppendBytes(list, item)
	}
	typeMeta := appendString(appendString(nil, kubeproto.TypeMetaAPIVersion, apiVersion), kubeproto.TypeMetaKind, kind)
	out := make([]byte, 0, len(kubeproto.Magic)+len(typeMeta)+len(list)+16)
	out = append(out, kubeproto.Magic...)
	out = protowire.AppendTag(out, kubeproto.UnknownTypeMeta, protowire.BytesType)
	out = protowire.AppendBytes(out, typeMeta)
	out = protowire.AppendTag(out, kubeproto.UnknownRaw, protowire.BytesType)
	out = protowire.AppendBytes(out, list)
	return appendString(appendString(out, kubeproto.UnknownContentEncoding, ""), kubeproto.UnknownContentType, ""), nil
}

// appendString appends field num of b, a string.
func appendString(b []byte, num protowire.Number, v string) []byte {
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), v)
}

// errNotProtobuf: an object the copy keeps as JSON, which a protobuf
// list cannot take as it is.
var errNotProtobuf = errors.New("kept as JSON, not protobuf")
