package watchmux

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/nodeproxy/nodeproxy/internal/kubeproto"
)

// protobufMeta reads of a protobuf-encoded object what the session needs,
// as meta does of a JSON one, without decoding the rest: it walks the
// few fields on the way (kubeproto has their layout) and skips the others
// whole. A malformed annotation is an error, as it is in JSON.
func protobufMeta(b []byte) (meta, error) {
	var m meta
	_, raw, err := kubeproto.Envelope(b)
	if err != nil {
		return m, err
	}
	om, err := kubeproto.Bytes(raw.Value(b), kubeproto.ObjectMetadata)
	if err != nil {
		return m, fmt.Errorf("object: %w", err)
	}
	for at := 0; at < len(om); {
		f, err := kubeproto.Next(om, at)
		if err != nil {
			return m, fmt.Errorf("metadata: %w", err)
		}
		at = f.End
		if f.Type != protowire.BytesType {
			continue
		}
		switch f.Num {
		case kubeproto.MetaResourceVersion:
			m.Metadata.ResourceVersion = string(f.Value(om))
		case kubeproto.MetaAnnotations:
			k, v, err := kubeproto.MapEntry(f.Value(om))
			if err != nil {
				return m, fmt.Errorf("metadata.annotations: %w", err)
			}
			if m.Metadata.Annotations == nil {
				m.Metadata.Annotations = map[string]string{}
			}
			m.Metadata.Annotations[string(k)] = string(v)
		}
	}
	return m, nil
}
