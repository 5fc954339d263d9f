package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// User is the user and group the image runs as: 65532, distroless's
// "nonroot", numeric so that the image needs no /etc/passwd and
// runAsNonRoot can check it.
const User = "65532:65532"

// Architectures are the ones make image builds by default.
var Architectures = []string{"amd64", "arm64"}

// Options say what to build.
type Options struct {
	// Root is the module's directory, where go build runs.
	Root string
	// Package is the command to build, "./cmd/nodeproxy".
	Package string
	// Name is the binary's name in the image, /<Name>, and its entrypoint.
	Name string
	// Helpers are commands the entrypoint runs, built the same way and
	// put beside it, /<Name> each (the node endpoint's Pod API checks
	// posted pods with nodeproxy-node-podadmit).
	Helpers []Binary
	// Architectures to build for linux; each must be a GOARCH.
	Architectures []string
	// Created is every timestamp in the image; the commit's time makes the
	// same commit give the same digest.
	Created time.Time
	// LDFlags are added to the go build's -ldflags (the version).
	LDFlags string
	// WorkDir holds the binaries while the image is assembled.
	WorkDir string
}

// Binary is a command to build into an image.
type Binary struct {
	// Package is the command, "./cmd/nodeproxy-node-podadmit".
	Package string
	// Name is its name in the image, /<Name>.
	Name string
}

// Validate returns every problem with o at once.
func (o Options) Validate() error {
	var errs []error
	if o.Root == "" {
		errs = append(errs, errors.New("the module's directory is not set"))
	}
	if o.Package == "" || o.Name == "" {
		errs = append(errs, errors.New("the package to build and the binary's name must both be set"))
	}
	for _, h := range o.Helpers {
		if h.Package == "" || h.Name == "" || h.Name == o.Name {
			errs = append(errs, fmt.Errorf("helper %+v: the package and a name of its own must both be set", h))
		}
	}
	if len(o.Architectures) == 0 {
		errs = append(errs, errors.New("no architecture to build for"))
	}
	for _, a := range o.Architectures {
		if !slices.Contains(knownArchitectures, a) {
			errs = append(errs, fmt.Errorf("architecture %q: want one of %v", a, knownArchitectures))
		}
	}
	if o.Created.IsZero() {
		errs = append(errs, errors.New("the creation time is not set: the image would not be reproducible"))
	}
	if o.WorkDir == "" {
		errs = append(errs, errors.New("no work directory for the binaries"))
	}
	return errors.Join(errs...)
}

// knownArchitectures are the Linux GOARCHes that Kubernetes nodes run.
var knownArchitectures = []string{"amd64", "arm64", "arm", "ppc64le", "s390x"}

// Build builds the binary for each architecture and returns the index of
// the images, one per platform, in the order of o.Architectures.
func Build(ctx context.Context, o Options) (v1.ImageIndex, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("image options: %w", err)
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range o.Architectures {
		img, err := platformImage(ctx, o, arch)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}},
		})
	}
	return idx, nil
}

// platformImage is the image of o's binary, and its helpers, for
// linux/arch.
func platformImage(ctx context.Context, o Options, arch string) (v1.Image, error) {
	dir := filepath.Join(o.WorkDir, arch)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var names []string
	for _, b := range append([]Binary{{Package: o.Package, Name: o.Name}}, o.Helpers...) {
		if err := buildBinary(ctx, o.Root, b.Package, arch, o.LDFlags, filepath.Join(dir, b.Name)); err != nil {
			return nil, err
		}
		names = append(names, b.Name)
	}
	layer, err := binaryLayer(dir, names, o.Created)
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{Layer: layer})
	if err != nil {
		return nil, fmt.Errorf("image for linux/%s: %w", arch, err)
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", arch
	cfg.Created = v1.Time{Time: o.Created}
	cfg.Config = v1.Config{
		Entrypoint: []string{"/" + o.Name},
		User:       User,
		// No shell in the image: nothing else is on the PATH.
		Env: []string{"PATH=/"},
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("config of the image for linux/%s: %w", arch, err)
	}
	return img, nil
}
