package disk

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOpenCreatesAPrivateDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run", "nodeproxy", "node-view")
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("directory created %v, want 0700", perm)
	}
	if s.Path() != filepath.Join(dir, fileName) {
		t.Errorf("Path() = %s", s.Path())
	}
}

func TestOpenRefusesADirectoryOthersMayEnter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(dir string) error
		want  error // nil: any error
	}{
		{"0755", func(dir string) error { return os.Chmod(dir, 0o755) }, ErrNotPrivate},
		{"0750", func(dir string) error { return os.Chmod(dir, 0o750) }, ErrNotPrivate},
		{"0701", func(dir string) error { return os.Chmod(dir, 0o701) }, ErrNotPrivate},
		{"another user's", func(dir string) error {
			if os.Geteuid() != 0 {
				t.Skip("chown needs root")
			}
			return os.Chown(dir, 65534, 65534)
		}, ErrNotPrivate},
		{"a file, not a directory", func(dir string) error {
			if err := os.Remove(dir); err != nil {
				return err
			}
			return os.WriteFile(dir, nil, 0o600)
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "view")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := tc.setup(dir); err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir, nil)
			if err == nil {
				t.Fatalf("Open of a %s directory succeeded (%s)", tc.name, s.Path())
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("Open error %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), dir) {
				t.Errorf("Open error %q does not name %s", err, dir)
			}
		})
	}
}

func TestSavedCopyIsPrivate(t *testing.T) {
	for _, key := range [][]byte{nil, testKey("a")} {
		s := openStore(t, key)
		if err := s.Save(snapshotOf(t, "pods=1", 3)); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(s.Path())
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("copy saved %v, want 0600", perm)
		}
	}
}

func TestOpenRefusesAKeyOfAnotherSize(t *testing.T) {
	for _, n := range []int{0, 16, 31, 33} {
		if _, err := Open(t.TempDir(), make([]byte, n)); err == nil {
			t.Errorf("Open with a key of %d bytes succeeded", n)
		}
	}
}
