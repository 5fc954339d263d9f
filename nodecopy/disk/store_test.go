package disk

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func TestSaveThenLoadReturnsTheSameCopy(t *testing.T) {
	withMarkup := Object{Resource: "configmaps", Raw: []byte(`{"apiVersion":"v1","kind":"ConfigMap","data":{"page":"<b>&</b>"}}`)}
	for _, tc := range []struct {
		name    string
		key     []byte
		objects int
	}{
		{"plaintext, empty view", nil, 0},
		{"plaintext", nil, 30},
		{"encrypted, empty view", testKey("a"), 0},
		{"encrypted", testKey("a"), 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, tc.key)
			want := snapshotOf(t, "secrets=700-812,pods=813", tc.objects)
			want.Objects = append(want.Objects, withMarkup)
			if tc.objects > 0 {
				want.Gone = []Gone{{Resource: "pods", Namespace: "ns", Name: "deleted", RV: 900}}
				want.Unvouched = true
			}
			onDisk := roundTrip(t, s, want)
			if plain := bytes.Contains(onDisk, []byte(b64([]byte(secretValue)))); tc.objects > 0 && plain != (tc.key == nil) {
				t.Errorf("secret data in the file: %v, with a key: %v", plain, tc.key != nil)
			}
		})
	}
}

func TestLoadWithoutCopyReturnsNothing(t *testing.T) {
	s := openStore(t, nil)
	snap, err := s.Load(testNode, testCluster)
	if snap != nil || err != nil {
		t.Fatalf("Load of an empty directory = %v, %v; want nil, nil", snap, err)
	}
}

func TestSaveReplacesTheCopy(t *testing.T) {
	s := openStore(t, nil)
	for _, pos := range []string{"pods=1", "pods=2"} {
		if err := s.Save(snapshotOf(t, pos, 3)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Load(testNode, testCluster)
	if err != nil || got.Position != "pods=2" {
		t.Fatalf("Load = %v, %v; want the second save", got, err)
	}
}

// TestLoadRefusesDamagedCopy damages a saved file and expects Load to
// refuse it whole, naming the file and the sentinel.
func TestLoadRefusesDamagedCopy(t *testing.T) {
	keyA := testKey("a")
	flip := func(at func(n int) int) func([]byte) []byte {
		return func(b []byte) []byte { b[at(len(b))] ^= 0x20; return b }
	}
	cut := func(at func(n int) int) func([]byte) []byte {
		return func(b []byte) []byte { return b[:at(len(b))] }
	}
	afterHeader := func(b []byte) int {
		return bytes.IndexByte(b[bytes.IndexByte(b, '\n')+1:], '\n') + bytes.IndexByte(b, '\n') + 2
	}
	for _, tc := range []struct {
		name   string
		key    []byte
		damage func([]byte) []byte
		want   error
	}{
		{"empty file", nil, cut(func(int) int { return 0 }), ErrCorrupt},
		{"truncated in the magic", nil, cut(func(int) int { return 7 }), ErrCorrupt},
		{"truncated in the header", nil, cut(func(int) int { return 40 }), ErrCorrupt},
		{"truncated in the body", nil, cut(func(n int) int { return n / 2 }), ErrCorrupt},
		{"truncated by one byte", nil, cut(func(n int) int { return n - 1 }), ErrCorrupt},
		{"truncated before the last line", nil, cut(func(n int) int { return n - trailerLen }), ErrCorrupt},
		{"encrypted, truncated in the body", keyA, cut(func(n int) int { return n / 2 }), ErrCorrupt},
		{"encrypted, truncated by one byte", keyA, cut(func(n int) int { return n - 1 }), ErrCorrupt},
		{"encrypted, nothing after the header", keyA, func(b []byte) []byte { return b[:afterHeader(b)] }, ErrCorrupt},
		{"a byte flipped in the middle", nil, flip(func(n int) int { return n / 2 }), ErrCorrupt},
		{"a byte flipped in an object's value, the JSON still valid", nil, func(b []byte) []byte {
			b[bytes.Index(b, []byte("xxxx"))] = 'X'
			return b
		}, ErrCorrupt},
		{"a byte flipped in the JSON's syntax", nil, func(b []byte) []byte {
			i := afterHeader(b)
			b[i] = '['
			return b
		}, ErrCorrupt},
		{"a byte flipped in the digest", nil, flip(func(n int) int { return n - 5 }), ErrCorrupt},
		{"encrypted, a byte flipped", keyA, flip(func(n int) int { return n / 2 }), ErrCorrupt},
		{"encrypted, a byte flipped in the tag", keyA, flip(func(n int) int { return n - 1 }), ErrCorrupt},
		{"bytes appended", nil, func(b []byte) []byte { return append(b, "\n{}\n"...) }, ErrCorrupt},
		{"wrong magic", nil, func(b []byte) []byte { return append([]byte("nodeproxy-pod-view"), b[len(magic):]...) }, ErrCorrupt},
		{"not a copy at all", nil, func([]byte) []byte { return []byte("{\"kind\":\"Secret\"}\n") }, ErrCorrupt},
		{"not a copy, and no line at all", nil, func(b []byte) []byte { return bytes.Repeat([]byte{0}, 2*ioBuffer) }, ErrCorrupt},
		{"format version 0", nil, func(b []byte) []byte {
			return bytes.Replace(b, fmt.Appendf(nil, "%s %d\n", magic, formatVersion), []byte(magic+" 0\n"), 1)
		}, ErrCorrupt},
		{"a future format version", nil, func(b []byte) []byte {
			return bytes.Replace(b, fmt.Appendf(nil, "%s %d\n", magic, formatVersion), fmt.Appendf(nil, "%s %d\n", magic, formatVersion+1), 1)
		}, ErrVersion},
		{"an unknown encryption", nil, func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"encryption":"none"`), []byte(`"encryption":"rot13"`), 1)
		}, ErrVersion},
		{"encrypted, a byte flipped in the header", keyA, func(b []byte) []byte {
			// The seal covers the header (in the nonce here: in the node's
			// name, it would be refused as another node's copy).
			i := bytes.Index(b, []byte(`"nonce":"`)) + len(`"nonce":"`)
			b[i] ^= 0x01
			return b
		}, ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, tc.key)
			if err := s.Save(snapshotOf(t, "pods=1", 12)); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(s.Path())
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(s.Path(), tc.damage(b), 0o600); err != nil {
				t.Fatal(err)
			}
			expectRefused(t, s, testNode, testCluster, tc.want)
		})
	}
}

// TestLoadReportsAReadErrorAsSuch: a copy Load cannot read is an error
// of its own, not a damaged copy.
func TestLoadReportsAReadErrorAsSuch(t *testing.T) {
	s := openStore(t, nil)
	if err := os.Mkdir(s.Path(), 0o700); err != nil { // reads fail with EISDIR
		t.Fatal(err)
	}
	snap, err := s.Load(testNode, testCluster)
	if snap != nil || err == nil || !errors.Is(err, syscall.EISDIR) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("Load of an unreadable copy = %v, %v; want EISDIR, not ErrCorrupt", snap, err)
	}
	if !strings.Contains(err.Error(), s.Path()) {
		t.Errorf("Load error %q does not name %s", err, s.Path())
	}
}

func TestLoadRefusesAnotherNodesOrClustersCopy(t *testing.T) {
	for _, tc := range []struct {
		name          string
		key           []byte
		node, cluster string
		want          error
	}{
		{"another node", nil, "node-b", testCluster, ErrOtherNode},
		{"another cluster", nil, testNode, "sha256:ffff", ErrOtherCluster},
		{"encrypted, another node", testKey("a"), "node-b", testCluster, ErrOtherNode},
		{"encrypted, another cluster", testKey("a"), testNode, "sha256:ffff", ErrOtherCluster},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, tc.key)
			if err := s.Save(snapshotOf(t, "pods=1", 3)); err != nil {
				t.Fatal(err)
			}
			expectRefused(t, s, tc.node, tc.cluster, tc.want)
		})
	}
}

func TestLoadRefusesWithoutTheKeyItWasSealedWith(t *testing.T) {
	for _, tc := range []struct {
		name            string
		saveKey, useKey []byte
	}{
		{"another key", testKey("a"), testKey("b")},
		{"no key", testKey("a"), nil},
		{"a key, and the copy not encrypted", nil, testKey("a")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, tc.saveKey)
			if err := s.Save(snapshotOf(t, "pods=1", 3)); err != nil {
				t.Fatal(err)
			}
			other, err := Open(s.dir, tc.useKey)
			if err != nil {
				t.Fatal(err)
			}
			expectRefused(t, other, testNode, testCluster, ErrUndecryptable)
		})
	}
}

// expectRefused loads and expects an error naming the file, wrapping
// want, and quoting no object data.
func expectRefused(t *testing.T, s *Store, node, cluster string, want error) {
	t.Helper()
	snap, err := s.Load(node, cluster)
	if snap != nil {
		t.Errorf("Load returned a copy of %d objects with error %v", len(snap.Objects), err)
	}
	if !errors.Is(err, want) {
		t.Fatalf("Load error %v, want %v", err, want)
	}
	msg := err.Error()
	t.Logf("refused: %s", msg)
	if !strings.Contains(msg, s.Path()) {
		t.Errorf("Load error %q does not name %s", msg, s.Path())
	}
	for _, data := range []string{secretValue, b64([]byte(secretValue)), "xxxx"} {
		if strings.Contains(msg, data) {
			t.Errorf("Load error %q quotes object data %q", msg, data)
		}
	}
}

// fullDisk fails with ENOSPC once room bytes have been written.
type fullDisk struct {
	w    io.Writer
	room int
}

func (d *fullDisk) Write(p []byte) (int, error) {
	if len(p) <= d.room {
		d.room -= len(p)
		return d.w.Write(p)
	}
	n, _ := d.w.Write(p[:d.room])
	d.room = 0
	return n, &os.PathError{Op: "write", Path: "copy.tmp", Err: syscall.ENOSPC}
}

func TestSaveOnAFullDiskKeepsThePreviousCopy(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  []byte
		room int
	}{
		{"no room at all", nil, 0},
		{"full in the header", nil, 30},
		{"full in the body", nil, 5000},
		{"full at the last line", nil, -trailerLen},
		{"encrypted, no room at all", testKey("a"), 0},
		{"encrypted, full in the body", testKey("a"), 5000},
		{"encrypted, full at the tag", testKey("a"), -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, tc.key)
			previous := snapshotOf(t, "pods=1", 12)
			if err := s.Save(previous); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(s.Path())
			if err != nil {
				t.Fatal(err)
			}
			room := tc.room
			if room < 0 {
				room += int(fi.Size()) // the next copy is as large: fail at its end
			}
			s.wrap = func(w io.Writer) io.Writer { return &fullDisk{w: w, room: room} }
			err = s.Save(snapshotOf(t, "pods=2", 12))
			if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), s.Path()) {
				t.Fatalf("Save on a full disk: %v, want ENOSPC naming %s", err, s.Path())
			}
			got, err := s.Load(testNode, testCluster)
			if err != nil || !reflect.DeepEqual(got, previous) {
				t.Fatalf("after a failed save, Load = %v, %v; want the previous copy", got, err)
			}
			expectOnlyTheCopy(t, s)
		})
	}
}

func TestSaveRefusesAnIncompleteSnapshot(t *testing.T) {
	valid := func() *Snapshot { return snapshotOf(t, "pods=1", 3) }
	for _, tc := range []struct {
		name string
		snap func() *Snapshot
	}{
		{"nil", func() *Snapshot { return nil }},
		{"no node", func() *Snapshot { s := valid(); s.Node = ""; return s }},
		{"no cluster", func() *Snapshot { s := valid(); s.Cluster = ""; return s }},
		{"a cluster too long", func() *Snapshot { s := valid(); s.Cluster = strings.Repeat("c", maxCluster+1); return s }},
		{"an object without resource", func() *Snapshot { s := valid(); s.Objects[1].Resource = ""; return s }},
		{"an object without JSON", func() *Snapshot { s := valid(); s.Objects[1].Raw = nil; return s }},
		{"an object that is not JSON", func() *Snapshot { s := valid(); s.Objects[2].Raw = []byte(`{"kind":`); return s }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, key := range [][]byte{nil, testKey("a")} {
				s := openStore(t, key)
				if err := s.Save(valid()); err != nil {
					t.Fatal(err)
				}
				if err := s.Save(tc.snap()); err == nil {
					t.Fatal("Save succeeded")
				}
				if got, err := s.Load(testNode, testCluster); err != nil || got.Position != "pods=1" {
					t.Fatalf("after a refused save, Load = %v, %v; want the previous copy", got, err)
				}
				expectOnlyTheCopy(t, s)
			}
		})
	}
}

// expectOnlyTheCopy fails if the directory holds anything but the copy,
// such as a temporary file left behind.
func expectOnlyTheCopy(t *testing.T, s *Store) {
	t.Helper()
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != fileName {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only %s", names, fileName)
	}
}

func TestOpenRemovesAnInterruptedSave(t *testing.T) {
	s := openStore(t, nil)
	if err := s.Save(snapshotOf(t, "pods=1", 3)); err != nil {
		t.Fatal(err)
	}
	// A crash between the temporary file's creation and its rename.
	if err := os.WriteFile(filepath.Join(s.dir, tmpPrefix+"123"), []byte(magic+" 1\n{"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(s.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	expectOnlyTheCopy(t, s)
	if got, err := s.Load(testNode, testCluster); err != nil || got.Position != "pods=1" {
		t.Fatalf("Load = %v, %v; want the copy", got, err)
	}
}

// TestConcurrentSavesLeaveAWholeCopy saves from several goroutines while
// others load: every load sees a whole copy, one of those saved.
func TestConcurrentSavesLeaveAWholeCopy(t *testing.T) {
	for _, key := range [][]byte{nil, testKey("a")} {
		t.Run(fmt.Sprintf("key=%v", key != nil), func(t *testing.T) {
			s := openStore(t, key)
			const writers, saves = 4, 10
			// Position "w<i>s<j>" goes with a copy of i+j+1 objects, so a
			// load can tell a mixed copy.
			sizeOf := func(pos string) int {
				var i, j int
				fmt.Sscanf(pos, "w%ds%d", &i, &j)
				return i + j + 1
			}
			var wg sync.WaitGroup
			done := make(chan struct{})
			for i := 0; i < writers; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := 0; j < saves; j++ {
						pos := fmt.Sprintf("w%ds%d", i, j)
						if err := s.Save(snapshotOf(t, pos, sizeOf(pos))); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			var readers sync.WaitGroup
			for r := 0; r < 2; r++ {
				readers.Add(1)
				go func() {
					defer readers.Done()
					for {
						select {
						case <-done:
							return
						default:
						}
						got, err := s.Load(testNode, testCluster)
						if err != nil {
							t.Error(err)
							return
						}
						if got != nil && len(got.Objects) != sizeOf(got.Position) {
							t.Errorf("copy at %s has %d objects, want %d", got.Position, len(got.Objects), sizeOf(got.Position))
						}
					}
				}()
			}
			wg.Wait()
			close(done)
			readers.Wait()
			got, err := s.Load(testNode, testCluster)
			if err != nil || !strings.HasSuffix(got.Position, fmt.Sprintf("s%d", saves-1)) {
				t.Fatalf("after the saves, Load = %v, %v; want some writer's last save", got, err)
			}
			expectOnlyTheCopy(t, s)
		})
	}
}
