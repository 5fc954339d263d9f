package disk

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Snapshot is a copy as persisted.
type Snapshot struct {
	Node     string    // the node whose view it is (system:node:<Node>)
	Cluster  string    // an opaque identity of the cluster, chosen by the caller (e.g. a digest of kube-apiserver's CA)
	Position string    // the view's position at the last applied bookmark
	SavedAt  time.Time // wall clock at save, for humans and logs only
	// BootID and BootTime are the boot the copy was saved in
	// (/proc/sys/kernel/random/boot_id) and the time since that boot
	// when it was last current (CLOCK_BOOTTIME): within one boot, the
	// copy's age by a clock nobody sets. Empty when unknown.
	BootID   string
	BootTime time.Duration
	Objects  []Object
	// Gone are the objects the copy saw deleted past its position, each
	// a floor no state at or before which may come back (nodecopy's
	// Gone); Unvouched, that the copy may lack what its node was served,
	// and must not be served offline until the hub brings it current.
	Gone      []Gone
	Unvouched bool
}

// Gone is one deletion the copy keeps.
type Gone struct {
	Resource  string `json:"resource"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	RV        uint64 `json:"resourceVersion"`
}

// Object is one object of the view, in the encoding the copy keeps it
// in: Raw or Protobuf, never both.
type Object struct {
	Resource string          `json:"resource"`         // "secrets", "pods", ... (the view's type)
	Raw      json.RawMessage `json:"object,omitempty"` // the object as JSON with apiVersion and kind; Load returns it compacted
	// Protobuf is the object in kube-apiserver's protobuf, from the
	// "k8s\x00" magic on (format 3), base64 in the file.
	Protobuf []byte `json:"protobuf,omitempty"`
}

// valid says whether o has a resource and exactly one encoding of its
// object.
func (o *Object) valid() bool {
	return o.Resource != "" && (len(o.Raw) == 0) != (len(o.Protobuf) == 0)
}

const (
	// fileName is the copy's name in the directory: one node, one copy.
	fileName = "copy"
	// tmpPrefix names a save in progress; Open removes leftovers.
	tmpPrefix = "copy.tmp-"
	// ioBuffer is the buffer between the encoder or decoder and the
	// file: a handful of writes a save instead of one per object, and
	// larger than any header line (maxHeaderLine).
	ioBuffer = 32 << 10
	// maxNode is the longest node name (a DNS subdomain).
	maxNode = 253
)

// Store keeps one node view copy in a directory (see doc.go). One Store
// a directory, in one process: saves are serialized within a Store, and
// Open removes any save in progress in the directory.
type Store struct {
	dir  string
	path string
	seal *sealer // nil: plaintext

	// mu serializes saves: one temporary file at a time, and the copy on
	// disk is the last Save to have taken mu. Load takes no lock: it
	// opens a file that no save ever writes into, only renames over.
	mu sync.Mutex
	// wrap, if set, wraps the writer of the temporary file: tests fail
	// it to play a full disk.
	wrap func(io.Writer) io.Writer
}

// Open returns the store of dir, creating dir (0700) if missing. key nil:
// no encryption; otherwise KeySize bytes, for AES-256-GCM. It refuses a
// directory that group or others may enter or that another user owns
// (ErrNotPrivate), and removes what a save cut short by a crash left.
// It registers the metrics (RegisterMetrics).
func Open(dir string, key []byte) (*Store, error) {
	RegisterMetrics() // as the cache does: a Store's metrics exist with it, whoever wires the endpoint
	s := &Store{dir: dir, path: filepath.Join(dir, fileName)}
	if key != nil {
		seal, err := newSealer(key)
		if err != nil {
			return nil, err
		}
		s.seal = seal
	}
	if err := privateDir(dir); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("node view directory: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return nil, fmt.Errorf("node view directory: remove an interrupted save: %w", err)
			}
		}
	}
	return s, nil
}

// Path is the copy's file.
func (s *Store) Path() string { return s.path }

// Save replaces the copy with snap, whole or not at all: it writes a
// temporary file in the directory, fsyncs it, renames it over the copy
// and fsyncs the directory. On any error the temporary file is removed
// and the previous copy is as it was. A zero snap.SavedAt is taken as
// now. Saves are serialized; the last one wins.
func (s *Store) Save(snap *Snapshot) error {
	start := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.saveLocked(snap)
	saves.WithLabelValues(saveResult(err)).Inc()
	saveDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		return fmt.Errorf("save node view copy %s: %w", s.path, err)
	}
	lastSaveBytes.Set(float64(n))
	return nil
}

func (s *Store) saveLocked(snap *Snapshot) (n int64, err error) {
	if err := validate(snap); err != nil {
		return 0, err
	}
	h := &header{Node: snap.Node, Cluster: snap.Cluster, Encryption: encryptionNone}
	if s.seal != nil {
		// A random 96-bit nonce a save: with the same key on a node for
		// years, at one save a second, the chance of a repeat stays below
		// 2^-32 for about 2^32 saves, which is what GCM asks.
		h.Encryption, h.KeyID = encryptionGCM, s.seal.id
		h.Nonce = make([]byte, s.seal.aead.NonceSize())
		if _, err := rand.Read(h.Nonce); err != nil {
			return 0, err
		}
	}
	pre, err := prelude(h)
	if err != nil {
		return 0, err
	}
	savedAt := snap.SavedAt
	if savedAt.IsZero() {
		savedAt = time.Now()
	}
	savedAt = savedAt.UTC()

	f, err := os.CreateTemp(s.dir, tmpPrefix+"*") // 0600
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	var w io.Writer = f
	if s.wrap != nil {
		w = s.wrap(f)
	}
	cw := &countingWriter{w: w}
	if s.seal == nil {
		err = writePlain(cw, pre, snap, savedAt)
	} else {
		err = s.writeSealed(cw, pre, h.Nonce, snap, savedAt)
	}
	if err != nil {
		return 0, err
	}
	if err = f.Sync(); err != nil {
		return 0, err
	}
	if err = f.Close(); err != nil {
		return 0, err
	}
	if err = os.Rename(f.Name(), s.path); err != nil {
		return 0, err
	}
	return cw.n, syncDir(s.dir)
}

func validate(snap *Snapshot) error {
	switch {
	case snap == nil:
		return errors.New("no snapshot")
	case snap.Node == "" || len(snap.Node) > maxNode:
		return fmt.Errorf("node name of %d bytes, want 1 to %d", len(snap.Node), maxNode)
	case snap.Cluster == "" || len(snap.Cluster) > maxCluster:
		return fmt.Errorf("cluster identity of %d bytes, want 1 to %d", len(snap.Cluster), maxCluster)
	}
	for i, o := range snap.Objects {
		if !o.valid() {
			return fmt.Errorf("object %d has no resource, or not one object (JSON or protobuf)", i)
		}
	}
	return nil
}

// writePlain streams prelude, body and trailer to w, digesting as it
// goes: no copy of the body is built.
func writePlain(w io.Writer, pre []byte, snap *Snapshot, savedAt time.Time) error {
	bw := bufio.NewWriterSize(w, ioBuffer)
	sum := sha256.New()
	mw := io.MultiWriter(bw, sum)
	if _, err := mw.Write(pre); err != nil {
		return err
	}
	if err := writeBody(mw, snap, savedAt); err != nil {
		return err
	}
	if _, err := bw.Write(trailer(sum.Sum(nil))); err != nil {
		return err
	}
	return bw.Flush()
}

// writeSealed writes prelude and sealed body. GCM seals a whole message,
// so the body is built once in memory and sealed in place: one copy of
// the body, against the plaintext's none.
func (s *Store) writeSealed(w io.Writer, pre, nonce []byte, snap *Snapshot, savedAt time.Time) error {
	var buf bytes.Buffer
	buf.Grow(bodySizeHint(snap) + s.seal.aead.Overhead())
	if err := writeBody(&buf, snap, savedAt); err != nil {
		return err
	}
	buf.Grow(s.seal.aead.Overhead()) // room for the tag: Seal appends in place
	body := buf.Bytes()
	sealed := s.seal.aead.Seal(body[:0], nonce, body, pre)
	if _, err := w.Write(pre); err != nil {
		return err
	}
	_, err := w.Write(sealed)
	return err
}

// bodySizeHint is about the size of the body lines: the objects, and a
// little for each line's framing.
func bodySizeHint(snap *Snapshot) int {
	n := 256 + len(snap.Position)
	for _, o := range snap.Objects {
		n += len(o.Raw) + len(o.Protobuf)*4/3 + len(o.Resource) + 32
	}
	return n
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Load reads the copy of node's view in cluster. It returns (nil, nil)
// when there is none, and never part of a copy: the whole file is
// checked (its SHA-256, or with a key its GCM tag) before Load returns.
// What it refuses, it refuses with an error naming the file and wrapping
// one of ErrCorrupt, ErrVersion, ErrOtherNode, ErrOtherCluster and
// ErrUndecryptable. With a key, a copy that is not encrypted is refused
// too (ErrUndecryptable): the key is also what proves that the endpoint
// wrote the copy, pods and all, for the kubelet to run. The header's node
// and cluster are compared before the body is read; a header damaged
// into another node's name is refused as another node's copy.
func (s *Store) Load(node, cluster string) (*Snapshot, error) {
	snap, err := s.load(node, cluster)
	loads.WithLabelValues(loadResult(snap, err)).Inc()
	return snap, err
}

func (s *Store) load(node, cluster string) (*Snapshot, error) {
	f, err := os.Open(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load node view copy: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("load node view copy: %w", err)
	}
	br := bufio.NewReaderSize(f, ioBuffer)
	pre, h, err := readPrelude(br)
	if err != nil {
		return nil, s.loadError(err)
	}
	switch {
	case h.Node != node:
		return nil, refuse(s.path, ErrOtherNode, "holds the view of node %q, not %q", h.Node, node)
	case h.Cluster != cluster:
		return nil, refuse(s.path, ErrOtherCluster, "of cluster %q, not %q", h.Cluster, cluster)
	}
	rest := fi.Size() - int64(len(pre))
	var m *meta
	var objs []Object
	switch h.Encryption {
	case encryptionNone:
		if s.seal != nil {
			return nil, refuse(s.path, ErrUndecryptable, "not encrypted, and a key is given: without the key, anyone who could write the directory could have written it")
		}
		m, objs, err = readPlain(br, pre, rest)
	case encryptionGCM:
		switch {
		case s.seal == nil:
			return nil, refuse(s.path, ErrUndecryptable, "encrypted (key id %s), and no key is given", h.KeyID)
		case h.KeyID != s.seal.id:
			return nil, refuse(s.path, ErrUndecryptable, "sealed with the key of id %s, and the key given is %s", h.KeyID, s.seal.id)
		}
		m, objs, err = s.readSealed(br, pre, h.Nonce, rest)
	default:
		return nil, refuse(s.path, ErrVersion, "encryption %q, unknown to this build", h.Encryption)
	}
	if err != nil {
		return nil, s.loadError(err)
	}
	return &Snapshot{Node: h.Node, Cluster: h.Cluster, Position: m.Position, SavedAt: m.SavedAt,
		BootID: m.BootID, BootTime: m.BootTime, Objects: objs, Gone: m.Gone, Unvouched: m.Unvouched}, nil
}

// loadError names the file and the sentinel of a decoding error; an I/O
// error is wrapped as it is.
func (s *Store) loadError(err error) error {
	var fe *errFormat
	switch {
	case errors.As(err, &fe) && fe.newer:
		return refuse(s.path, ErrVersion, "%s", fe.detail)
	case errors.As(err, &fe):
		return refuse(s.path, ErrCorrupt, "%s", fe.detail)
	default:
		return fmt.Errorf("load node view copy %s: %w", s.path, err)
	}
}

// readPlain decodes the body as it reads it, digesting it on the way,
// and checks the digest against the last line: rest is what follows the
// prelude, the body and the trailer.
func readPlain(br *bufio.Reader, pre []byte, rest int64) (*meta, []Object, error) {
	bodyLen := rest - int64(trailerLen)
	if bodyLen < 0 {
		return nil, nil, damaged("truncated: %d bytes after the header, fewer than the last line's %d", rest, trailerLen)
	}
	sum := sha256.New()
	sum.Write(pre)
	m, objs, err := decodeBody(io.TeeReader(io.LimitReader(br, bodyLen), sum))
	if err != nil {
		return nil, nil, err
	}
	got := make([]byte, trailerLen)
	if _, err := io.ReadFull(br, got); err != nil {
		return nil, nil, readError("last line", err)
	}
	if err := checkTrailer(got, sum.Sum(nil)); err != nil {
		return nil, nil, err
	}
	return m, objs, nil
}

// readSealed reads and opens the sealed body (rest bytes), then decodes
// it: the file's size once in memory, opened in place.
func (s *Store) readSealed(br *bufio.Reader, pre, nonce []byte, rest int64) (*meta, []Object, error) {
	aead := s.seal.aead
	if len(nonce) != aead.NonceSize() {
		return nil, nil, damaged("nonce of %d bytes, want %d", len(nonce), aead.NonceSize())
	}
	if rest < int64(aead.Overhead()) {
		return nil, nil, damaged("truncated: %d bytes after the header, fewer than the tag's %d", rest, aead.Overhead())
	}
	sealed := make([]byte, rest)
	if _, err := io.ReadFull(br, sealed); err != nil {
		return nil, nil, readError("body", err)
	}
	body, err := aead.Open(sealed[:0], nonce, sealed, pre)
	if err != nil {
		return nil, nil, damaged("fails its GCM authentication tag under the right key: damaged or truncated")
	}
	return decodeBody(bytes.NewReader(body))
}
