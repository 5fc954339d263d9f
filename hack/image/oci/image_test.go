package oci

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/nodeproxy/nodeproxy/internal/cli"
	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

var created = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// testOptions builds an image as make image does, for this machine's
// architecture only, of the smallest command that links the version
// stamp, named nodeproxy: what is tested is the image around a binary,
// and a static -trimpath build of the real hub shares nothing with the
// test's own build (it took 441 s of a cold CI run on 2 cores).
func testOptions(t *testing.T) Options {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return Options{Root: root, Package: "./hack/image/oci/testdata/version", Name: "nodeproxy", Architectures: []string{runtime.GOARCH},
		Created: created, LDFlags: cli.VersionLDFlag + "v0.0.0-test", WorkDir: t.TempDir()}
}

// TestImageIsTheBinaryAloneRunAsNonRoot builds the image, writes it as
// make image does, reads it back from the files an operator loads, and
// runs the binary it holds.
func TestImageIsTheBinaryAloneRunAsNonRoot(t *testing.T) {
	ref, _ := name.NewTag("nodeproxy:dev")
	_, w := buildAndWrite(t, testOptions(t))

	// The layout's index.json names one multi-arch index, by the name
	// ctr import gives it.
	fromLayout, err := layout.ImageIndexFromPath(w.Layout)
	if err != nil {
		t.Fatal(err)
	}
	top, err := fromLayout.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].Digest != w.Digest || top.Manifests[0].Annotations["io.containerd.image.name"] != "index.docker.io/library/nodeproxy:dev" {
		t.Fatalf("index.json %+v, want one entry, %s, named nodeproxy:dev", top.Manifests, w.Digest)
	}
	multi, err := fromLayout.ImageIndex(w.Digest)
	if err != nil {
		t.Fatal(err)
	}
	imgs, err := Platforms(multi)
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 1 || imgs[runtime.GOARCH] == nil {
		t.Fatalf("platforms %v, want %s", imgs, runtime.GOARCH)
	}

	for arch, img := range imgs {
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.OS != "linux" || cfg.Architecture != arch {
			t.Errorf("%s: config says %s/%s", arch, cfg.OS, cfg.Architecture)
		}
		if cfg.Config.User != "65532:65532" {
			t.Errorf("%s: runs as %q, want 65532:65532 (non-root, numeric for runAsNonRoot)", arch, cfg.Config.User)
		}
		if !slices.Equal(cfg.Config.Entrypoint, []string{"/nodeproxy"}) || len(cfg.Config.Cmd) != 0 {
			t.Errorf("%s: entrypoint %v cmd %v, want /nodeproxy alone", arch, cfg.Config.Entrypoint, cfg.Config.Cmd)
		}
		if !cfg.Created.Equal(created) {
			t.Errorf("%s: created %s, want %s", arch, cfg.Created, created)
		}
		bin := layerFiles(t, img, t.TempDir(), "nodeproxy")["nodeproxy"]
		if arch == runtime.GOARCH {
			out, err := exec.Command(bin).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "version v0.0.0-test" {
				t.Errorf("%s: the binary: %v: %q, want version v0.0.0-test", arch, err, out)
			}
			if out, err := exec.Command("go", "version", "-m", bin).Output(); err != nil || !strings.Contains(string(out), "CGO_ENABLED=0") {
				t.Errorf("%s: the binary is not static (CGO_ENABLED=0): %v\n%s", arch, err, out)
			}
		}

		// The docker tarball holds the same image, tagged.
		fromTar, err := tarball.ImageFromPath(w.DockerTarballs[arch], &ref)
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		want, _ := img.ConfigName()
		if got, err := fromTar.ConfigName(); err != nil || got != want {
			t.Errorf("%s: docker tarball's config %s (%v), want %s", arch, got, err, want)
		}
	}
}

// buildAndWrite builds the image of o and writes it as make image does,
// tagged nodeproxy:dev, into a temporary directory.
func buildAndWrite(t *testing.T, o Options) (v1.ImageIndex, Written) {
	t.Helper()
	idx, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.NewTag("nodeproxy:dev")
	w, err := Write(filepath.Join(t.TempDir(), "image"), idx, ref, created)
	if err != nil {
		t.Fatal(err)
	}
	return idx, w
}

// layerFiles checks that img has one layer holding the files names and
// nothing else, each root's, executable by all and writable by none,
// stamped with created; it writes them into dir and returns their paths.
func layerFiles(t *testing.T, img v1.Image, dir string, names ...string) map[string]string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var got []string
	paths := map[string]string{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, hdr.Name)
		path := filepath.Join(dir, filepath.Base(hdr.Name))
		paths[hdr.Name] = path
		if hdr.Mode != 0o555 || hdr.Uid != 0 || !hdr.ModTime.Equal(created) {
			t.Errorf("%s: mode %o uid %d mtime %s, want 555, root's, %s", hdr.Name, hdr.Mode, hdr.Uid, hdr.ModTime, created)
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, tr); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if !slices.Equal(got, names) {
		t.Fatalf("layer holds %v, want %v", got, names)
	}
	return paths
}

// TestImageCarriesItsHelpers: a helper is built as the binary is and put
// beside it, in the same layer; the entrypoint is still the binary.
func TestImageCarriesItsHelpers(t *testing.T) {
	o := testOptions(t)
	o.Helpers = []Binary{{Package: "./hack/image/oci/testdata/version", Name: "nodeproxy-helper"}}
	idx, _ := buildAndWrite(t, o)
	imgs, err := Platforms(idx)
	if err != nil {
		t.Fatal(err)
	}
	img := imgs[runtime.GOARCH]
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Config.Entrypoint, []string{"/nodeproxy"}) {
		t.Errorf("entrypoint %v, want /nodeproxy", cfg.Config.Entrypoint)
	}
	helper := layerFiles(t, img, t.TempDir(), "nodeproxy", "nodeproxy-helper")["nodeproxy-helper"]
	if out, err := exec.Command(helper).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "version v0.0.0-test" {
		t.Errorf("the helper: %v: %q, want version v0.0.0-test", err, out)
	}
}

// TestImageIsReproducible: two builds of the same tree, in different work
// directories, give the same digest and the same bytes on disk.
func TestImageIsReproducible(t *testing.T) {
	var digests []v1.Hash
	var tars [][]byte
	for range 2 {
		_, w := buildAndWrite(t, testOptions(t))
		raw, err := os.ReadFile(w.LayoutTar)
		if err != nil {
			t.Fatal(err)
		}
		digests, tars = append(digests, w.Digest), append(tars, raw)
	}
	if digests[0] != digests[1] {
		t.Errorf("digests %s and %s: the build is not reproducible", digests[0], digests[1])
	}
	if string(tars[0]) != string(tars[1]) {
		t.Error("the two OCI archives differ")
	}
}

// TestImageHasEveryPlatform builds a small command for amd64 and arm64,
// as make image builds nodeproxy: one index, a manifest per platform, each
// image's config naming its architecture, a docker tarball each.
func TestImageHasEveryPlatform(t *testing.T) {
	o := testOptions(t)
	o.Package, o.Name, o.Architectures = "./hack/image/oci/testdata/version", "version", Architectures
	idx, w := buildAndWrite(t, o)
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, d := range m.Manifests {
		platforms = append(platforms, d.Platform.OS+"/"+d.Platform.Architecture)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Architecture != d.Platform.Architecture {
			t.Errorf("the %s manifest's config says %s", d.Platform.Architecture, cfg.Architecture)
		}
		if _, err := os.Stat(w.DockerTarballs[d.Platform.Architecture]); err != nil {
			t.Errorf("docker tarball of %s: %v", d.Platform.Architecture, err)
		}
	}
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("platforms %v, want linux/amd64 and linux/arm64", platforms)
	}
}

func TestOptionsRefuseWhatCannotBeBuilt(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"no time", func(o *Options) { o.Created = time.Time{} }, "the creation time is not set"},
		{"unknown architecture", func(o *Options) { o.Architectures = []string{"amd64", "x86"} }, `architecture "x86": want one of`},
		{"no architecture", func(o *Options) { o.Architectures = nil }, "no architecture to build for"},
		{"no package", func(o *Options) { o.Package = "" }, "the package to build and the binary's name must both be set"},
		{"a helper named as the binary", func(o *Options) { o.Helpers = []Binary{{Package: "./cmd/x", Name: "nodeproxy"}} }, "a name of its own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Root: "/src", Package: "./cmd/nodeproxy", Name: "nodeproxy", Architectures: []string{"amd64"}, Created: created, WorkDir: "/tmp"}
			tc.edit(&o)
			_, err := Build(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestBuildSaysWhichPackageFailed(t *testing.T) {
	o := testOptions(t)
	o.Package, o.Architectures = "./cmd/no-such-command", []string{runtime.GOARCH}
	_, err := Build(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "go build ./cmd/no-such-command for linux/"+runtime.GOARCH) {
		t.Errorf("error %v, want it to name the package and platform", err)
	}
}

// TestImagePushesToARegistry: the index make image writes goes into an
// OCI distribution registry (go-containerregistry's, in this process, which
// checks every manifest and blob it is sent) and comes back by tag with
// the same digest, each platform's image and layers whole. This is the
// path `crane push bin/image/nodeproxy.oci.tar` or a CI job takes; docker
// and containerd are not on this machine.
func TestImagePushesToARegistry(t *testing.T) {
	idx, w := buildAndWrite(t, testOptions(t))
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	ref, err := name.ParseReference(strings.TrimPrefix(reg.URL, "http://") + "/nodeproxy:dev")
	if err != nil {
		t.Fatal(err)
	}
	fromLayout, err := layout.ImageIndexFromPath(w.Layout)
	if err != nil {
		t.Fatal(err)
	}
	written, err := fromLayout.ImageIndex(w.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, written); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}

	pulled, err := remote.Index(ref)
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	if got, _ := pulled.Digest(); got != w.Digest {
		t.Errorf("pulled index %s, pushed %s", got, w.Digest)
	}
	built, _ := idx.Digest()
	if built != w.Digest {
		t.Errorf("built index %s, written %s", built, w.Digest)
	}
	img, err := remote.Image(ref, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}))
	if err != nil {
		t.Fatalf("pull %s for linux/%s: %v", ref, runtime.GOARCH, err)
	}
	if err := validate.Image(img); err != nil {
		t.Errorf("the pulled image does not hold together: %v", err)
	}
	bin := layerFiles(t, img, t.TempDir(), "nodeproxy")["nodeproxy"]
	if out, err := exec.Command(bin).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "version v0.0.0-test" {
		t.Errorf("the pulled binary: %v: %q, want version v0.0.0-test", err, out)
	}
}
