// Package disk keeps the node endpoint's copy of its node view on the
// node's own file system, so that an endpoint or kubelet restart (with
// the default tmpfs directory), or a node reboot (with a disk directory),
// during a control-plane outage brings the node's pods back with their
// secrets and configmaps. The copy itself, in memory, is package
// nodecopy's; it calls Save after applying a batch at its bookmark, and
// Load once at start. docs/operations.md, "Secrets at rest on the node",
// says which directory to choose and where a key can come from.
//
// A Store is one directory and one file in it, <dir>/copy:
//
//	nodeproxy-node-view 3\n                                  magic, format version
//	{"node":"node-a","cluster":"…","encryption":"none"}\n    header (JSON)
//	{"position":"secrets=700-812,…","savedAt":"…","objects":N,"gone":[…]}\n  ┐
//	{"resource":"secrets","object":{"apiVersion":"v1",…}}\n      │ body: one
//	…                                                            │ line an object
//	{"resource":"pods","protobuf":"azhzAAo…"}\n                 ┘
//	sha256 <64 hex digits>\n                                  SHA-256 of all above
//
// With a key the header says "encryption":"aes-256-gcm" and carries the
// key's id (an HMAC of a fixed string under the key, so that a wrong key
// is told from a damaged file) and the save's random nonce; the body
// follows, sealed with AES-256-GCM (its 16-byte tag last), with the first
// two lines as additional authenticated data; there is no digest line.
// An object the copy keeps in kube-apiserver's protobuf (what the hub
// sends the endpoint's view) is its "protobuf", base64; one it keeps as
// JSON is its "object" (format 3; formats 1 and 2 had JSON alone, and
// are still read).
// Without a key the file is JSON lines anyone with access can read, as
// the kubelet's own secret volumes on tmpfs are. It is not compressed:
// secrets' data is base64 in JSON, and the copy is small (about 210 KB
// for 100 objects of 2 KiB) beside the CPU gzip would take at every save.
//
// Invariants:
//   - Atomic: Save writes a temporary file in the directory, fsyncs it,
//     renames it over the copy and fsyncs the directory. A crash or a full
//     disk at any point leaves the previous copy whole; Open removes a
//     temporary file a crash left. Saves are serialized; the last wins.
//   - Never half a copy: Load checks the whole file (digest or tag) before
//     returning anything, and refuses a truncated, damaged, newer, other
//     node's, other cluster's or undecryptable file with an error naming
//     it and wrapping a sentinel (ErrCorrupt, ErrVersion, ErrOtherNode,
//     ErrOtherCluster, ErrUndecryptable).
//   - Root-only: the directory is 0700 and owned by the endpoint's user,
//     or Open refuses it (ErrNotPrivate); files are 0600. The digest
//     guards against accidents only; against a writer, only the key does,
//     so with a key a plaintext copy is refused.
//   - Memory: a plaintext save streams, object by object, through the
//     digest to the file, and a load decodes as it reads; with a key, GCM
//     seals and opens a whole message, so the body is held once in memory
//     (sealed and opened in place).
//   - No clock decides anything: SavedAt is for humans and logs; the
//     copy's freshness is its position, which the hub judges on resume.
//   - Nothing here logs; errors never quote object data.
package disk
