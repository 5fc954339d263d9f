// Package image assembles nodeproxy's container image with only the Go
// toolchain and github.com/google/go-containerregistry: no Docker daemon,
// no registry, no base image to pull.
//
//	go build (CGO_ENABLED=0, -trimpath, per GOARCH)
//	    -> one layer: the static binary at /<name>, nothing else
//	    -> one image per platform: non-root user, the binary as entrypoint
//	    -> one index over the platforms
//	    -> written as an OCI layout (dir and tar) and one docker-save
//	       tarball per platform
//
// Invariants:
//   - Reproducible: the same source and Options give the same digests.
//     Every timestamp (file mtimes in the layer, the config's created
//     time, the tars' headers) is Options.Created, the binaries are built
//     with -trimpath and an empty build ID, and the layer's gzip carries
//     no time or name.
//   - Minimal: a layer holds the one binary, owned by root and not
//     writable by the user the image runs as. No shell, no libc, no CA
//     bundle: the hub and the node endpoint trust only the CAs their
//     kubeconfigs and flags name.
package oci
