package disk

import (
	"errors"
	"fmt"
)

// What Load refuses, for callers to branch on with errors.Is. Each comes
// wrapped in an error that names the file and says what was found. A
// caller that gets any of them starts from an empty copy (and the hub's
// initial state); the next Save replaces the file.
var (
	// ErrCorrupt: the file is not a whole copy as Save wrote it:
	// truncated, a byte changed, not a copy at all, or (encrypted) a
	// ciphertext that fails its authentication tag under the right key.
	ErrCorrupt = errors.New("corrupt or truncated")
	// ErrVersion: written in a format this build does not read, by a
	// newer nodeproxy (a rollback after an upgrade).
	ErrVersion = errors.New("written in a newer format")
	// ErrOtherNode: a whole copy, of another node's view.
	ErrOtherNode = errors.New("another node's copy")
	// ErrOtherCluster: a whole copy, of another cluster (the node joined
	// another cluster under the same name).
	ErrOtherCluster = errors.New("another cluster's copy")
	// ErrUndecryptable: encrypted and no key given, sealed with another
	// key, or not encrypted while a key is given (see Store.Load).
	ErrUndecryptable = errors.New("cannot be decrypted with the key given")
	// ErrNotPrivate: Open's directory is open to group or others, or
	// owned by another user.
	ErrNotPrivate = errors.New("not private to its owner")
)

// refuse is Load's error: the file, the sentinel, and what was found.
func refuse(path string, sentinel error, format string, args ...any) error {
	return fmt.Errorf("node view copy %s: %w: %s", path, sentinel, fmt.Sprintf(format, args...))
}
