package oci

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// WriteLayout writes idx as an OCI image layout in dir (which must not
// exist yet), its one entry in index.json named ref by the annotations
// that containerd (`ctr import`) and the OCI spec read. `crane push dir
// REF` pushes it; WriteLayoutTar makes one file of it.
func WriteLayout(dir string, idx v1.ImageIndex, ref name.Tag) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("OCI layout %s exists already: remove it first", dir)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	err = p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          ref.Name(),
		"org.opencontainers.image.ref.name": ref.TagStr(),
	}))
	if err != nil {
		return fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	return nil
}

// WriteLayoutTar writes the OCI layout in dir as one tar file at out, the
// form `ctr import` and `docker load` (Docker 25 and later) take, with
// every header's time set to created so that the file is reproducible.
func WriteLayoutTar(dir, out string, created time.Time) (err error) {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(f)
	// WalkDir visits in lexical order, so the tar's order is fixed too.
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: created, Mode: 0o644, Format: tar.FormatUSTAR}
		if d.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
			return tw.WriteHeader(hdr)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		return fmt.Errorf("tar of the OCI layout %s: %w", dir, err)
	}
	return tw.Close()
}

// WriteDockerTarball writes img tagged ref as a `docker save` tarball at
// out: what `docker load`, `kind load image-archive` and `ctr import`
// take, one platform per file.
func WriteDockerTarball(out string, img v1.Image, ref name.Tag) error {
	if err := tarball.WriteToFile(out, ref, img); err != nil {
		return fmt.Errorf("docker tarball %s: %w", out, err)
	}
	return nil
}

// Platforms returns the images of idx by architecture.
func Platforms(idx v1.ImageIndex) (map[string]v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	imgs := make(map[string]v1.Image, len(m.Manifests))
	for _, desc := range m.Manifests {
		if desc.Platform == nil {
			return nil, fmt.Errorf("manifest %s has no platform", desc.Digest)
		}
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return nil, err
		}
		imgs[desc.Platform.Architecture] = img
	}
	return imgs, nil
}
