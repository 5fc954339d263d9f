package cache

import (
	"unique"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/nodeproxy/nodeproxy/internal/kubeproto"
)

// segments are an object's bytes (protobufOf's) in up to three pieces,
// each its own allocation, whose concatenation is the whole, cut where
// the type's layout says (cuts). A version takes each piece of the
// version before it that is equal to its own (shareBytes); a version's
// metadata always differs (its resourceVersion), so what is worth a piece
// of its own is what a type's writes leave alone:
//   - a pod: metadata, spec, status. A kubelet's status write changes
//     metadata and status, never the spec, so the change log's history of
//     a pod costs its status writes, not a whole pod each.
//   - a secret or a configmap: metadata, then the rest (data, type). A
//     write of labels or annotations (a controller's, a reloader's hash)
//     keeps the data, most of the bytes; a write of the data changes both
//     pieces, and a third piece for the few bytes after the data (a
//     Secret's type) would cost more in its allocation and header than
//     it shares.
//   - a Node: everything up to its status's conditions included; the
//     status from its addresses to its images; the rest of the status
//     (volumes in use and attached, config, runtime handlers, features).
//     A kubelet's status write (its conditions' heartbeats) changes the
//     first piece alone. The middle piece is what a kubelet writes at
//     its start or when it changes: its images (a list of up to 50
//     pulled images, most of a Node's bytes, written anew when one is
//     pulled or removed), and its addresses and node info (about 300
//     bytes, which a heartbeat would otherwise copy). The last follows
//     the pods' volumes. A Node's spec and metadata are too small to pay
//     for a piece of their own. The first piece holds the status's
//     length, which may differ between versions whose middle piece is
//     the same: each version's pieces are cut from its own whole, so the
//     pieces it shares are equal bytes, whatever the prefix before them
//     says.
//
// Where the bytes do not have that shape (metadata not first, nothing
// after it) the first segment holds them whole. An Object points at its
// segments, so that one kept decoded pays a pointer for them.
//
// selected is the one field a selector reads of a type kept as bytes
// that the Object's own fields do not hold, read at ingest and interned
// (a cluster has a handful of values): a Secret's type (bulk's "type="
// selector), a Node's spec.unschedulable ("true", or the zero handle for
// false). It is kept here rather than on Object so that no other object
// pays for it: an Object fills its size class (112 bytes) and a word more
// would take every object, pods included, to 128; the segments take 56
// bytes of 64, so the handle costs nothing (docs/architecture.md,
// "Objects as kube-apiserver's bytes").
//
// Each piece is a string: what a version holds is never written once the
// store made it, which a string's type says, and a string header is two
// words where a slice's is three, which puts the segments in the 64-byte
// size class rather than 80.
type segments struct {
	part     [3]string
	selected unique.Handle[string]
}

// cuts is where a type's bytes are cut after the object's metadata
// (field 1): at the first field after it and at each later change of
// top-level field number, at most top times (a map's entries are one
// field repeated, so a Secret's data is one piece however many keys it
// has); or, where within is not zero, around the fields numbered from
// through to inside the top-level field within: before the first and
// after the last, so that they are the middle piece (a Node's status from
// its addresses to its images).
type cuts struct {
	top              int
	within, from, to protowire.Number
}

var (
	metadataSpecStatus = cuts{top: 2}                    // pods
	metadataRest       = cuts{top: 1}                    // secrets and configmaps
	nodeStatusWrites   = cuts{within: 3, from: 5, to: 8} // Node.status (3): NodeStatus.addresses (5) to images (8), k8s.io/api's generated.proto
)

// splitSegments cuts whole as layout says, copying each piece so that
// sharing one keeps nothing else of whole alive, and so that nothing
// can write them.
func splitSegments(whole []byte, layout cuts) *segments {
	at := cutPoints(whole, layout)
	if len(at) == 0 {
		return &segments{part: [3]string{string(whole)}}
	}
	s := &segments{}
	from := 0
	for i, to := range append(at, len(whole)) {
		s.part[i] = string(whole[from:to])
		from = to
	}
	return s
}

// cutPoints are where whole is cut (see cuts): none when the object's
// first field is not its metadata, nothing follows it, or (within) none
// of the fields to cut around is there.
func cutPoints(whole []byte, layout cuts) []int {
	_, raw, err := kubeproto.Envelope(whole)
	if err != nil || raw.Num == 0 {
		return nil
	}
	fs, err := kubeproto.Fields(raw.Value(whole))
	if err != nil || len(fs) < 2 || fs[0].Num != kubeproto.ObjectMetadata {
		return nil
	}
	if layout.within != 0 {
		return cutsAround(whole, raw.Start, fs, layout)
	}
	var at []int
	for i := 1; i < len(fs) && len(at) < layout.top; i++ {
		if fs[i].Num != fs[i-1].Num {
			at = append(at, raw.Start+fs[i].Tag)
		}
	}
	return at
}

// cutsAround are the two cuts around the fields numbered layout.from
// through layout.to inside the top-level field layout.within of fs (the
// object's fields, at base in whole): where the first one's tag begins
// and where the last one's value ends. They are one run, since
// kube-apiserver's encoder writes a message's fields in the order of
// their numbers, a repeated field's entries together.
func cutsAround(whole []byte, base int, fs []kubeproto.Field, layout cuts) []int {
	for _, f := range fs {
		if f.Num != layout.within {
			continue
		}
		from := base + f.Start
		inner, err := kubeproto.Fields(whole[from : base+f.End])
		if err != nil {
			return nil
		}
		for i, g := range inner {
			if g.Num < layout.from || g.Num > layout.to {
				continue
			}
			last := i
			for last+1 < len(inner) && inner[last+1].Num >= layout.from && inner[last+1].Num <= layout.to {
				last++
			}
			return []int{from + g.Tag, from + inner[last].End}
		}
		return nil
	}
	return nil
}

// join is the whole: the first segment itself when it is all (which the
// caller must not modify), else a new copy the caller owns; nil for no
// segments.
func (s *segments) join() []byte {
	if s == nil {
		return nil
	}
	p := &s.part
	if p[1] == "" && p[2] == "" {
		return unsafe.Slice(unsafe.StringData(p[0]), len(p[0]))
	}
	b := make([]byte, 0, len(p[0])+len(p[1])+len(p[2]))
	return append(append(append(b, p[0]...), p[1]...), p[2]...)
}

// empty says whether the object is kept decoded (it has no segments).
func (s *segments) empty() bool { return s == nil || s.part[0] == "" }

// share makes each segment equal to prev's (if any) be prev's.
func (s *segments) share(prev *segments) {
	if prev == nil {
		return
	}
	for i, p := range s.part {
		if p != "" && p == prev.part[i] {
			s.part[i] = prev.part[i]
		}
	}
}

// specTag begins a pod's spec (field 2, length-delimited): the tag
// sameSpec finds at the start of a second segment that is a spec, and not
// at the start of one cut inside a field (a Node's, at its status's
// addresses).
const specTag = 2<<3 | 2

// sameSpec says whether s and other are in three segments whose second is
// their second top-level field (a pod's spec), and share it as one
// allocation: share made it so because the bytes were equal.
func (s *segments) sameSpec(other *segments) bool {
	if s.empty() || other.empty() || s.part[2] == "" || other.part[2] == "" || len(s.part[1]) != len(other.part[1]) || s.part[1] == "" {
		return false
	}
	return s.part[1][0] == specTag && unsafe.StringData(s.part[1]) == unsafe.StringData(other.part[1])
}
