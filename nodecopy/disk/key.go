package disk

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
)

// KeySize is the size of a key: AES-256.
const KeySize = 32

// ReadKeyFile reads a key: KeySize raw bytes, or their standard base64
// encoding (surrounding white space ignored, so `head -c 32 /dev/urandom
// | base64 > key` works). A file that group or others may read, write
// or run is refused, as ssh refuses a private key: whoever reads the key
// reads the secrets. Errors name the file, never its content.
func ReadKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("node view key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("node view key: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("node view key %s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("node view key %s: mode %v lets group or others at it: make it 0600 or 0400", path, perm)
	}
	// A key file is 32 or 44 bytes; reading a little more than that tells
	// a wrong file without reading a large one.
	b := make([]byte, 128)
	n, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("node view key %s: %w", path, err)
	}
	b = b[:n]
	if len(b) == KeySize {
		return b, nil
	}
	text := bytes.TrimSpace(b)
	key := make([]byte, base64.StdEncoding.DecodedLen(len(text)))
	n, err = base64.StdEncoding.Decode(key, text)
	if err != nil || n != KeySize {
		return nil, fmt.Errorf("node view key %s: neither %d raw bytes nor the base64 of %d bytes (%d bytes read)", path, KeySize, KeySize, len(b))
	}
	return key[:n], nil
}

// sealer is a key, ready to seal and open.
type sealer struct {
	aead cipher.AEAD
	id   string
}

func newSealer(key []byte) (*sealer, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("node view key: %d bytes, want %d (AES-256)", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead, id: keyID(key)}, nil
}

// keyID names a key in the header, so that a copy sealed with another key
// is told apart from a damaged one. An HMAC of a fixed string under the
// key: it reveals nothing of the key, and 64 bits make an accidental
// match between two keys negligible.
func keyID(key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("nodeproxy node view key id"))
	return hex.EncodeToString(m.Sum(nil)[:8])
}
