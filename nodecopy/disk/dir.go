package disk

import (
	"fmt"
	"os"
)

// privateDir creates dir (0700) if missing and refuses one that group or
// others may enter, or that another user owns: the copy holds the node's
// secrets, and anyone who may write the directory could put a copy of
// their own there, pods and all, for the kubelet to run.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("node view directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("node view directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("node view directory %s: not a directory", dir)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("node view directory %s: %w: mode %v, want 0700 (it holds the node's secrets)", dir, ErrNotPrivate, perm)
	}
	if uid, ok := owner(fi); ok && uid != os.Geteuid() {
		return fmt.Errorf("node view directory %s: %w: owned by uid %d, not by this process's (%d)", dir, ErrNotPrivate, uid, os.Geteuid())
	}
	return nil
}

// syncDir makes the rename of a new copy durable: without it, a power
// loss after Save returned could bring back the previous copy.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err == nil {
		err = d.Sync()
		if cerr := d.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("sync node view directory: %w", err)
	}
	return nil
}
