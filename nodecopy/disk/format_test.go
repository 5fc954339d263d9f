package disk

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"reflect"
	"testing"
)

// protobufObject stands for an object in kube-apiserver's protobuf: the
// store keeps its bytes whatever they hold.
func protobufObject(i int) []byte {
	return fmt.Appendf([]byte("k8s\x00"), "\n\x0f\n\x02v1\x12\x03Pod\x12 pod %d \x00\xff\n", i)
}

// TestACopyOfTheOlderFormatLoads: a copy saved by a build of format 2
// (testdata/copy-format2, written by nodeproxy at 16a171e with
// snapshotOf's three objects) loads as the objects it holds, all JSON.
func TestACopyOfTheOlderFormatLoads(t *testing.T) {
	b, err := os.ReadFile("testdata/copy-format2")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte(magic+" 2\n")) {
		t.Fatalf("the fixture is not of format 2: %q", b[:30])
	}
	s := openStore(t, nil)
	if err := os.WriteFile(s.Path(), b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(testNode, testCluster)
	if err != nil {
		t.Fatal(err)
	}
	want := snapshotOf(t, "secrets=700-812,pods=813", 3)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("loaded %+v\nwant %+v", got, want)
	}
}

// TestACopyWithProtobufObjectsIsOfTheNewFormat: objects kept as protobuf
// are saved and loaded as the bytes they are, beside JSON ones, plain
// and sealed, in a file of format 3, which a build that reads up to 2
// refuses as newer (the version check every build makes first, as
// "a future format version" in TestLoadRefusesDamagedCopy shows for
// this one).
func TestACopyWithProtobufObjectsIsOfTheNewFormat(t *testing.T) {
	for _, key := range [][]byte{nil, testKey("a")} {
		t.Run(fmt.Sprintf("encrypted=%v", key != nil), func(t *testing.T) {
			s := openStore(t, key)
			want := snapshotOf(t, "secrets=700-812,pods=813", 3)
			for i := range 3 {
				want.Objects = append(want.Objects, Object{Resource: "pods", Protobuf: protobufObject(i)})
			}
			b := roundTrip(t, s, want)
			if !bytes.HasPrefix(b, []byte(magic+" 3\n")) {
				t.Errorf("saved as %q, want format 3", b[:bytes.IndexByte(b, '\n')])
			}
		})
	}
}

// TestAnObjectWithBothEncodingsOrNeitherIsRefused: an object line is
// JSON or protobuf, never both, never neither.
func TestAnObjectWithBothEncodingsOrNeitherIsRefused(t *testing.T) {
	s := openStore(t, nil)
	for _, o := range []Object{
		{Resource: "pods"},
		{Resource: "pods", Raw: []byte(`{"kind":"Pod"}`), Protobuf: protobufObject(0)},
	} {
		snap := snapshotOf(t, "pods=1", 1)
		snap.Objects = append(snap.Objects, o)
		if err := s.Save(snap); err == nil {
			t.Errorf("saved an object with JSON %q and protobuf %q", o.Raw, o.Protobuf)
		}
	}
	if err := s.Save(snapshotOf(t, "pods=1", 1)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	// The one object line given a protobuf beside its JSON, the digest
	// made again: the format, not the digest, refuses it.
	body := bytes.Replace(b[:len(b)-trailerLen], []byte(`{"resource":"secrets",`), []byte(`{"resource":"secrets","protobuf":"azhzAA==",`), 1)
	if err := os.WriteFile(s.Path(), append(body, trailer(sha(body))...), 0o600); err != nil {
		t.Fatal(err)
	}
	expectRefused(t, s, testNode, testCluster, ErrCorrupt)
}

func sha(b []byte) []byte {
	sum := sha256.Sum256(b)
	return sum[:]
}
