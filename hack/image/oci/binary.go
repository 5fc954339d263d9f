package oci

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// buildBinary builds the Go package pkg (./cmd/nodeproxy) of the module at
// root for linux/goarch into out, statically (CGO_ENABLED=0: the image has
// no libc) and reproducibly: -trimpath drops the build machine's paths,
// -buildid= the build ID that differs between toolchain caches, and -s -w
// the symbol and DWARF tables (a fifth of the size; stack traces keep
// their function names and lines). ldflags adds to those, for the version.
func buildBinary(ctx context.Context, root, pkg, goarch, ldflags, out string) error {
	// grpcnotrace: see BUILDTAGS in the Makefile.
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-tags", "grpcnotrace",
		"-ldflags", "-s -w -buildid= "+ldflags, "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for linux/%s: %w\n%s", pkg, goarch, err, output)
	}
	if _, err := os.Stat(out); err != nil {
		return fmt.Errorf("go build %s for linux/%s wrote no %s: %w", pkg, goarch, filepath.Base(out), err)
	}
	return nil
}
