package disk

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadKeyFile(t *testing.T) {
	key := testKey("a")
	for _, tc := range []struct {
		name    string
		content []byte
		mode    os.FileMode
		want    []byte // nil: refused
	}{
		{"32 raw bytes", key, 0o600, key},
		{"32 raw bytes, read-only", key, 0o400, key},
		{"32 raw bytes ending in white space", append(key[:31:31], '\n'), 0o600, append(key[:31:31], '\n')},
		{"base64", []byte(b64(key)), 0o600, key},
		{"base64 and a newline", []byte(b64(key) + "\n"), 0o600, key},
		{"base64 of 16 bytes", []byte(b64(key[:16]) + "\n"), 0o600, nil},
		{"31 raw bytes", key[:31], 0o600, nil},
		{"empty", nil, 0o600, nil},
		{"a larger file", bytes.Repeat(key, 10), 0o600, nil},
		{"readable by the group", key, 0o640, nil},
		{"readable by others", key, 0o604, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "key")
			if err := os.WriteFile(path, tc.content, tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tc.mode); err != nil { // past the umask
				t.Fatal(err)
			}
			got, err := ReadKeyFile(path)
			switch {
			case tc.want == nil && err == nil:
				t.Fatalf("ReadKeyFile succeeded")
			case tc.want == nil:
				if !strings.Contains(err.Error(), path) {
					t.Errorf("error %q does not name %s", err, path)
				}
				if strings.Contains(err.Error(), b64(key)) {
					t.Errorf("error %q quotes the key", err)
				}
			case err != nil:
				t.Fatal(err)
			case !bytes.Equal(got, tc.want):
				t.Errorf("key %x, want %x", got, tc.want)
			}
		})
	}
	if _, err := ReadKeyFile(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("ReadKeyFile of a missing file succeeded")
	}
}
