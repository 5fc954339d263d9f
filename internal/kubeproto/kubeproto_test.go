package kubeproto

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
)

func str(b []byte, num protowire.Number, v string) []byte {
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), v)
}

func msg(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

func varint(b []byte, num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

// object is a pod's message as the tests build it: metadata (name,
// namespace, resourceVersion, a label), a varint field, a fixed64 and a
// fixed32 one, and a spec.
var object = func() []byte {
	meta := str(str(str(nil, MetaName, "web"), MetaNamespace, "shop"), MetaResourceVersion, "7")
	meta = msg(meta, MetaLabels, str(str(nil, MapEntryKey, "app"), MapEntryValue, "web"))
	b := msg(nil, ObjectMetadata, meta)
	b = varint(b, 9, 300)
	b = protowire.AppendFixed64(protowire.AppendTag(b, 10, protowire.Fixed64Type), 1)
	b = protowire.AppendFixed32(protowire.AppendTag(b, 11, protowire.Fixed32Type), 1)
	return msg(b, ObjectSpec, str(nil, 10, "node-1"))
}()

var whole = func() []byte {
	tm := str(str(nil, TypeMetaAPIVersion, "v1"), TypeMetaKind, "Pod")
	b := msg(append([]byte(nil), Magic...), UnknownTypeMeta, tm)
	b = msg(b, UnknownRaw, object)
	return str(str(b, UnknownContentEncoding, ""), UnknownContentType, "")
}()

// TestFieldsOfMessages: a message's fields are listed with their numbers,
// wire types and offsets, and bad bytes (truncated, overflowing, of a
// wire type protobuf does not have, field number 0, an unclosed group)
// are an error, never a panic.
func TestFieldsOfMessages(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want []Field // nil: an error
	}{
		{"empty", nil, []Field{}},
		{"one string", str(nil, 1, "ab"), []Field{{Num: 1, Type: protowire.BytesType, Tag: 0, Start: 2, End: 4}}},
		{"empty string", str(nil, 3, ""), []Field{{Num: 3, Type: protowire.BytesType, Tag: 0, Start: 2, End: 2}}},
		{"varint, fixed64, fixed32", protowire.AppendFixed32(protowire.AppendTag(protowire.AppendFixed64(protowire.AppendTag(varint(nil, 1, 300), 2, protowire.Fixed64Type), 1), 3, protowire.Fixed32Type), 1),
			[]Field{{Num: 1, Type: protowire.VarintType, Tag: 0, Start: 1, End: 3}, {Num: 2, Type: protowire.Fixed64Type, Tag: 3, Start: 4, End: 12}, {Num: 3, Type: protowire.Fixed32Type, Tag: 12, Start: 13, End: 17}}},
		{"two-byte tag", str(nil, 300, "x"), []Field{{Num: 300, Type: protowire.BytesType, Tag: 0, Start: 3, End: 4}}},
		{"a group, skipped whole", protowire.AppendTag(varint(protowire.AppendTag(nil, 4, protowire.StartGroupType), 1, 1), 4, protowire.EndGroupType),
			[]Field{{Num: 4, Type: protowire.StartGroupType, Tag: 0, Start: 1, End: 4}}},
		{"truncated tag", []byte{0x80}, nil},
		{"truncated length", []byte{0x0a}, nil},
		{"length past the end", []byte{0x0a, 0x05, 'a', 'b'}, nil},
		{"length overflowing int", append([]byte{0x0a}, protowire.AppendVarint(nil, 1<<63)...), nil},
		{"truncated varint", []byte{0x08, 0x80}, nil},
		{"varint of 11 bytes", append([]byte{0x08}, bytes.Repeat([]byte{0xff}, 10)...), nil},
		{"truncated fixed64", []byte{0x09, 1, 2, 3}, nil},
		{"truncated fixed32", []byte{0x0d, 1, 2}, nil},
		{"wire type 6", []byte{0x0e, 0}, nil},
		{"wire type 7", []byte{0x0f, 0}, nil},
		{"field number 0", []byte{0x02, 0}, nil},
		{"unclosed group", protowire.AppendTag(nil, 4, protowire.StartGroupType), nil},
		{"good then truncated", append(str(nil, 1, "ab"), 0x12, 0x03), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Fields(tc.in)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("no error, fields %+v", got)
				}
				if len(got) != 0 {
					t.Errorf("fields %+v with the error %v", got, err)
				}
				if _, err := Bytes(tc.in, 1); err == nil {
					t.Error("Bytes: no error")
				}
				if err := EachBytes(tc.in, func(protowire.Number, []byte) error { return nil }); err == nil {
					t.Error("EachBytes: no error")
				}
				if _, _, err := MapEntry(tc.in); err == nil {
					t.Error("MapEntry: no error")
				}
				if _, _, err := Envelope(append([]byte(Magic), tc.in...)); err == nil {
					t.Error("Envelope: no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("fields %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("field %d: %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestBytesIsTheLastOfItsNumber: of a repeated length-delimited field
// Bytes gives the last (as a decoder keeps it), ignores fields of the
// number with another wire type, and gives nil for one absent.
func TestBytesIsTheLastOfItsNumber(t *testing.T) {
	b := varint(str(str(nil, 2, "first"), 2, "last"), 2, 5)
	for _, tc := range []struct {
		num  protowire.Number
		want []byte
	}{{2, []byte("last")}, {3, nil}} {
		got, err := Bytes(b, tc.num)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("field %d: %q, want %q", tc.num, got, tc.want)
		}
	}
	var seen []string
	if err := EachBytes(b, func(num protowire.Number, v []byte) error { seen = append(seen, string(v)); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(seen, ",") != "first,last" {
		t.Errorf("EachBytes saw %q, want the two strings", seen)
	}
	stop := errors.New("stop")
	if err := EachBytes(b, func(protowire.Number, []byte) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("EachBytes returned %v, want fn's error", err)
	}
}

// TestEnvelopeOfKubeAPIServersEncoding: of a pod as kube-apiserver's
// protobuf serializer writes it, Envelope finds the type meta and the
// pod's own message, and the metadata and label are where ObjectMeta's
// field numbers say.
func TestEnvelopeOfKubeAPIServersEncoding(t *testing.T) {
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", ResourceVersion: "7", UID: "u-1",
		Labels: map[string]string{"app": "web"}}, Spec: corev1.PodSpec{NodeName: "node-1"}}
	var buf bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(pod, &buf); err != nil {
		t.Fatal(err)
	}
	got := buf.Bytes()
	if !IsProtobuf(got) {
		t.Fatalf("no magic: %q", got[:8])
	}
	tm, raw, err := Envelope(got)
	if err != nil {
		t.Fatal(err)
	}
	var meta runtime.TypeMeta
	if err := meta.Unmarshal(tm.Value(got)); err != nil || meta.APIVersion != "v1" || meta.Kind != "Pod" {
		t.Errorf("type meta %+v (%v), want v1 Pod", meta, err)
	}
	want, err := pod.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw.Value(got), want) {
		t.Error("raw is not the pod's message")
	}
	om, err := Bytes(raw.Value(got), ObjectMetadata)
	if err != nil {
		t.Fatal(err)
	}
	values := map[protowire.Number]string{}
	var label [2]string
	err = EachBytes(om, func(num protowire.Number, v []byte) error {
		if num == MetaLabels {
			k, val, err := MapEntry(v)
			label = [2]string{string(k), string(val)}
			return err
		}
		values[num] = string(v)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if values[MetaName] != "web" || values[MetaNamespace] != "shop" || values[MetaUID] != "u-1" || values[MetaResourceVersion] != "7" || label != [2]string{"app", "web"} {
		t.Errorf("metadata %q, label %q", values, label)
	}
}

// TestEnvelopeOfBadBytes: bytes without the magic are ErrNotProtobuf;
// the magic alone is an envelope without fields; a truncated envelope is
// an error.
func TestEnvelopeOfBadBytes(t *testing.T) {
	if _, _, err := Envelope([]byte(`{"kind":"Pod"}`)); !errors.Is(err, ErrNotProtobuf) {
		t.Errorf("JSON: %v, want ErrNotProtobuf", err)
	}
	if _, _, err := Envelope([]byte("k8s")); !errors.Is(err, ErrNotProtobuf) {
		t.Errorf("three bytes of the magic: %v, want ErrNotProtobuf", err)
	}
	tm, raw, err := Envelope([]byte(Magic))
	if err != nil || tm.Num != 0 || raw.Num != 0 {
		t.Errorf("the magic alone: %+v %+v %v, want no fields and no error", tm, raw, err)
	}
	_, full, err := Envelope(whole)
	if err != nil || !bytes.Equal(full.Value(whole), object) {
		t.Fatalf("whole: %v, raw %q", err, full.Value(whole))
	}
	// A cut inside the typeMeta or raw field must fail; one between
	// fields is an envelope, with or without raw.
	for cut := len(Magic) + 1; cut < full.End; cut++ {
		if _, raw, err := Envelope(whole[:cut]); err == nil && raw.Num != 0 {
			t.Errorf("cut at %d inside raw (ending at %d): raw %+v and no error", cut, full.End, raw)
		}
	}
}

// FuzzFields: on any bytes, no reader panics; Next's inline reading
// gives protowire's answer (consume) at every field; and where Fields
// succeeds its fields tile the bytes: each begins where the one before
// ended, the last ends at the end, and each value lies within its field.
func FuzzFields(f *testing.F) {
	f.Add(whole)
	f.Add(object)
	f.Add([]byte{})
	f.Add([]byte{0x80})
	f.Add([]byte{0x0a, 0x05, 'a'})
	f.Add(protowire.AppendTag(nil, 4, protowire.StartGroupType))
	f.Add(msg(nil, 1, bytes.Repeat([]byte{'x'}, 200)))
	f.Add(msg(nil, 1, bytes.Repeat([]byte{'x'}, 20000)))
	f.Add([]byte{0x0a, 0x80, 0x01})
	f.Add(str(nil, 300, "two-byte tag"))
	f.Add(varint(nil, 40, 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		for at := 0; at < len(b); {
			got, err := Next(b, at)
			want, wantErr := consume(b, at)
			if got != want || (err == nil) != (wantErr == nil) {
				t.Fatalf("at byte %d: Next %+v, %v; protowire %+v, %v", at, got, err, want, wantErr)
			}
			if err != nil {
				break
			}
			at = got.End
		}
		fs, err := Fields(b)
		if err == nil {
			at := 0
			for _, g := range fs {
				if g.Tag != at || g.Start <= g.Tag || g.End < g.Start || g.End > len(b) {
					t.Fatalf("field %+v does not follow byte %d in %d bytes", g, at, len(b))
				}
				at = g.End
			}
			if at != len(b) {
				t.Fatalf("fields end at %d of %d", at, len(b))
			}
		}
		_, _ = Bytes(b, 2)
		_ = EachBytes(b, func(protowire.Number, []byte) error { return nil })
		_, _, _ = MapEntry(b)
		_, _, _ = Envelope(b)
		_, _, _ = Envelope(append([]byte(Magic), b...))
	})
}
