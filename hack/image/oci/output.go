package oci

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Written is what Write wrote.
type Written struct {
	// Digest is the index's: the multi-arch image's identity, what `crane
	// push` prints and a pod can pin.
	Digest v1.Hash
	// Layout is the OCI layout directory, LayoutTar the same as one tar.
	Layout, LayoutTar string
	// DockerTarballs are the `docker save` tarballs by architecture.
	DockerTarballs map[string]string
}

// Write replaces dir's contents with idx as an OCI layout (dir/oci), its
// tar (dir/<name>-oci.tar) and one docker tarball per architecture
// (dir/<name>-<arch>.tar), all tagged ref, whose repository's last
// element is <name> (nodeproxy, nodeproxy-node).
func Write(dir string, idx v1.ImageIndex, ref name.Tag, created time.Time) (Written, error) {
	base := path.Base(ref.RepositoryStr())
	w := Written{Layout: filepath.Join(dir, "oci"), LayoutTar: filepath.Join(dir, base+"-oci.tar"), DockerTarballs: map[string]string{}}
	var err error
	if w.Digest, err = idx.Digest(); err != nil {
		return w, fmt.Errorf("digest of the index: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return w, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return w, err
	}
	if err := WriteLayout(w.Layout, idx, ref); err != nil {
		return w, err
	}
	if err := WriteLayoutTar(w.Layout, w.LayoutTar, created); err != nil {
		return w, err
	}
	imgs, err := Platforms(idx)
	if err != nil {
		return w, err
	}
	for arch, img := range imgs {
		tarball := filepath.Join(dir, base+"-"+arch+".tar")
		if err := WriteDockerTarball(tarball, img, ref); err != nil {
			return w, err
		}
		w.DockerTarballs[arch] = tarball
	}
	return w, nil
}
