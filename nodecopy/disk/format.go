package disk

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// The file's layout is in doc.go.
const (
	// magic opens the first line; the format version follows it.
	magic = "nodeproxy-node-view"
	// formatVersion is the version Save writes and the newest Load reads.
	// 2 added the deletions the copy keeps as floors (gone) and whether it
	// vouches for what it holds: a build that reads 1 alone refuses a
	// copy of 2, which could otherwise bring a deleted object back. 3
	// added objects kept in protobuf (an object line's "protobuf"
	// instead of its "object"): a build that reads up to 2 refuses a
	// copy of 3 as a newer format's (ErrVersion), rather than reading
	// such a line as an object without a body.
	formatVersion = 3

	encryptionNone = "none"
	encryptionGCM  = "aes-256-gcm"

	// maxHeaderLine bounds the header line, so that a file that is not a
	// copy is refused without reading it whole. A node name is at most
	// 253 bytes, a cluster identity at most maxCluster; the rest of the
	// line is under 200.
	maxHeaderLine = 4096
	maxCluster    = 1024

	// trailerPrefix and trailerLen: the plaintext file's last line,
	// "sha256 <64 hex digits>\n", of fixed length so that a reader knows
	// where the body ends from the file's size alone.
	trailerPrefix = "sha256 "
	trailerLen    = len(trailerPrefix) + 64 + 1

	// maxPrealloc bounds the objects Load allocates room for ahead of
	// decoding them: the count is read before the digest is checked.
	maxPrealloc = 4096
)

// header is the second line: what Load checks before it reads the body.
// With a key, the first two lines are the additional authenticated data
// of the seal.
type header struct {
	Node       string `json:"node"`
	Cluster    string `json:"cluster"`
	Encryption string `json:"encryption"`
	// KeyID tells a wrong key from a damaged file (keyID).
	KeyID string `json:"keyID,omitempty"`
	Nonce []byte `json:"nonce,omitempty"`
}

// meta is the body's first line.
type meta struct {
	Position string        `json:"position"`
	SavedAt  time.Time     `json:"savedAt"`
	BootID   string        `json:"bootID,omitempty"`
	BootTime time.Duration `json:"bootTime,omitempty"`
	Objects  int           `json:"objects"`
	// Gone and Unvouched, from format 2: Snapshot's.
	Gone      []Gone `json:"gone,omitempty"`
	Unvouched bool   `json:"unvouched,omitempty"`
}

// prelude is the first two lines of a copy, as Save writes them.
func prelude(h *header) ([]byte, error) {
	line, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(magic)+4+len(line))
	b = fmt.Appendf(b, "%s %d\n", magic, formatVersion)
	b = append(b, line...)
	return append(b, '\n'), nil
}

// writeBody writes the body lines: meta, then one object a line. Each
// object goes through the encoder alone, so the body is never built
// whole here (the encrypted path builds it in w, once).
func writeBody(w io.Writer, snap *Snapshot, savedAt time.Time) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // keep an object's bytes as given, "<" and all
	if err := enc.Encode(meta{Position: snap.Position, SavedAt: savedAt, BootID: snap.BootID, BootTime: snap.BootTime, Objects: len(snap.Objects),
		Gone: snap.Gone, Unvouched: snap.Unvouched}); err != nil {
		return err
	}
	for i := range snap.Objects {
		if err := enc.Encode(&snap.Objects[i]); err != nil {
			return fmt.Errorf("object %d (%s): %w", i, snap.Objects[i].Resource, err)
		}
	}
	return nil
}

// errFormat is a decoding failure; the caller wraps it in ErrCorrupt or
// ErrVersion with the file's name.
type errFormat struct {
	newer  bool // a newer format, not damage
	detail string
}

func (e *errFormat) Error() string { return e.detail }

func damaged(format string, args ...any) error {
	return &errFormat{detail: fmt.Sprintf(format, args...)}
}

// readPrelude reads and parses the first two lines. It returns them as
// read, for the digest or the seal.
func readPrelude(br *bufio.Reader) ([]byte, *header, error) {
	first, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return nil, nil, damaged("does not begin with %q", magic+" <version>")
	}
	if err != nil {
		return nil, nil, readError("first line", err)
	}
	word, version, ok := strings.Cut(strings.TrimSuffix(string(first), "\n"), " ")
	if !ok || word != magic {
		return nil, nil, damaged("does not begin with %q", magic+" <version>")
	}
	v, err := strconv.Atoi(version)
	switch {
	case err != nil || v < 1:
		return nil, nil, damaged("format version %q", version)
	case v > formatVersion:
		return nil, nil, &errFormat{newer: true, detail: fmt.Sprintf("format version %d, this build reads %d", v, formatVersion)}
	}
	out := append(make([]byte, 0, len(first)+256), first...)
	second, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) || len(second) > maxHeaderLine {
		return nil, nil, damaged("header line longer than %d bytes", maxHeaderLine)
	}
	if err != nil {
		return nil, nil, readError("header line", err)
	}
	out = append(out, second...)
	h := &header{}
	if err := json.Unmarshal(second, h); err != nil {
		return nil, nil, decodeError("header line", err, nil)
	}
	return out, h, nil
}

// decodeBody decodes the body lines from r, which must hold them and
// nothing else. It reads one object at a time: the decoder buffers a
// line, not the file.
func decodeBody(r io.Reader) (*meta, []Object, error) {
	er := &errReader{r: r}
	dec := json.NewDecoder(er)
	m := &meta{}
	if err := dec.Decode(m); err != nil {
		return nil, nil, decodeError("body's first line", err, er)
	}
	if m.Objects < 0 {
		return nil, nil, damaged("%d objects", m.Objects)
	}
	objs := make([]Object, 0, min(m.Objects, maxPrealloc))
	for i := 0; i < m.Objects; i++ {
		var o Object
		if err := dec.Decode(&o); err != nil {
			return nil, nil, decodeError(fmt.Sprintf("object %d of %d", i+1, m.Objects), err, er)
		}
		if !o.valid() {
			return nil, nil, damaged("object %d of %d has no resource, or not one object (JSON or protobuf)", i+1, m.Objects)
		}
		objs = append(objs, o)
	}
	switch err := dec.Decode(&struct{}{}); {
	case er.err != nil:
		return nil, nil, fmt.Errorf("body: %w", er.err)
	case err != io.EOF:
		return nil, nil, damaged("more than the %d objects its first line counts", m.Objects)
	}
	return m, objs, nil
}

// trailer is the plaintext file's last line for a digest.
func trailer(sum []byte) []byte {
	return fmt.Appendf(make([]byte, 0, trailerLen), "%s%x\n", trailerPrefix, sum)
}

// checkTrailer compares the last line, as read, with the digest of all
// before it.
func checkTrailer(got, sum []byte) error {
	if !bytes.Equal(got, trailer(sum)) {
		return damaged("SHA-256 of the content is not the one its last line records")
	}
	return nil
}

// readError is a failure to read what: damage if the file ends early,
// else the reader's error as it is (a disk's error is not a damaged copy).
func readError(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return damaged("%s: truncated", what)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// decodeError says why JSON did not decode without quoting any of it: the
// decoder's own messages can carry a value, and values here are secrets.
// An error of the reader under the decoder (r, if any) is a read error.
func decodeError(what string, err error, r *errReader) error {
	var syntax *json.SyntaxError
	switch {
	case r != nil && r.err != nil:
		return fmt.Errorf("%s: %w", what, r.err)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return damaged("%s: truncated", what)
	case errors.As(err, &syntax):
		return damaged("%s: not JSON (its byte %d)", what, syntax.Offset)
	default:
		return damaged("%s: not of the expected shape", what)
	}
}

// errReader keeps its reader's last error other than io.EOF, so that a
// failure of the disk under the decoder is told from a damaged copy.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}
