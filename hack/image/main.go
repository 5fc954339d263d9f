// Command image builds one of nodeproxy's container images with only Go
// (make image builds both): one binary (--binary: the hub, or the node
// endpoint with the helper its Pod API runs), static and non-root, for each
// architecture, written as an OCI layout (a directory and a tar) and as one
// `docker save` tarball per architecture. See hack/image/oci and
// docs/operations.md, "Building the image".
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/nodeproxy/nodeproxy/hack/image/oci"
	"github.com/nodeproxy/nodeproxy/internal/cli"
)

// binaries are the commands an image is made of, one each: the hub, and
// the node endpoint without the hub, which every node runs and which
// links none of the hub's server (docs/benchmarks.md, "Binary sizes").
var binaries = []string{"nodeproxy", "nodeproxy-node"}

// helpers are the commands an image's binary runs, put beside it: the
// node endpoint's Pod API checks posted pods in a process of its own
// (podapi/admission).
var helpers = map[string][]oci.Binary{
	"nodeproxy-node": {{Package: "./cmd/nodeproxy-node-podadmit", Name: "nodeproxy-node-podadmit"}},
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "make image:", err)
		os.Exit(1)
	}
}

func run() error {
	binary := flag.String("binary", "nodeproxy", "The command the image carries: nodeproxy (the hub: manifests/base), alone, or nodeproxy-node (the node endpoint: manifests/node), with nodeproxy-node-podadmit, its Pod API's checks.")
	out := flag.String("output", "bin/image", "Directory to write into; its previous image is replaced.")
	tag := flag.String("tag", "", "The name the image is loaded as. Default: <binary>:dev, the names manifests/ and `nodeproxy-node install` use.")
	archs := flag.String("platforms", strings.Join(oci.Architectures, ","), "Comma-separated Linux architectures.")
	version := flag.String("version", "", "What --version prints; empty for `git describe --always --dirty`.")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", flag.Args())
	}
	if !slices.Contains(binaries, *binary) {
		return fmt.Errorf("--binary %q: want one of %v", *binary, binaries)
	}
	if *tag == "" {
		*tag = *binary + ":dev"
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		return fmt.Errorf("--tag: %w", err)
	}
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	if *version == "" {
		if *version, err = git(root, "describe", "--always", "--dirty"); err != nil {
			return err
		}
	}
	created, err := commitTime(root)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "nodeproxy-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	idx, err := oci.Build(context.Background(), oci.Options{
		Root: root, Package: "./cmd/" + *binary, Name: *binary, Helpers: helpers[*binary],
		Architectures: strings.Split(*archs, ","), Created: created,
		LDFlags: cli.VersionLDFlag + *version, WorkDir: work,
	})
	if err != nil {
		return err
	}
	w, err := oci.Write(*out, idx, ref, created)
	if err != nil {
		return err
	}
	fmt.Printf("%s %s (%s) %s\n", ref.Name(), w.Digest, *archs, created.Format(time.RFC3339))
	fmt.Printf("  OCI layout     %s (crane push %s REGISTRY/%s:TAG)\n", w.Layout, w.Layout, *binary)
	fmt.Printf("  OCI archive    %s (ctr -n k8s.io images import --all-platforms)\n", w.LayoutTar)
	for _, arch := range strings.Split(*archs, ",") {
		fmt.Printf("  docker archive %s (docker load -i, kind load image-archive)\n", w.DockerTarballs[arch])
	}
	return nil
}

// commitTime is HEAD's commit time: the image's every timestamp, so the
// same commit gives the same digest (SOURCE_DATE_EPOCH overrides it, as
// reproducible-builds tools expect).
func commitTime(root string) (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		var err error
		if s, err = git(root, "log", "-1", "--format=%ct"); err != nil {
			return time.Time{}, err
		}
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("commit time %q: %w", s, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}

func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
