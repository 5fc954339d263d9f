package kubeproto

import "google.golang.org/protobuf/encoding/protowire"

// Fields every API object shares: its metadata (an ObjectMeta) is its
// field 1 and its spec, where it has one, its field 2.
const (
	ObjectMetadata protowire.Number = 1
	ObjectSpec     protowire.Number = 2
)

// ObjectMeta's fields (k8s.io/apimachinery's meta/v1 generated.proto).
const (
	MetaName            protowire.Number = 1
	MetaNamespace       protowire.Number = 3
	MetaUID             protowire.Number = 5
	MetaResourceVersion protowire.Number = 6
	MetaLabels          protowire.Number = 11 // map entries
	MetaAnnotations     protowire.Number = 12 // map entries
)

// The fields of a map field's entry.
const (
	MapEntryKey   protowire.Number = 1
	MapEntryValue protowire.Number = 2
)
