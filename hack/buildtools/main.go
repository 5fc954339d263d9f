// Command buildtools builds the kube-apiserver and etcd that tests and the
// demo run, unless this machine already has them. `make tools` runs it.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodeproxy/nodeproxy/internal/controlplane"
)

func main() {
	bins, err := controlplane.EnsureBinaries(context.Background(), os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "buildtools: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("kube-apiserver and etcd ready in %s\n", filepath.Dir(bins.KubeAPIServer))
}
