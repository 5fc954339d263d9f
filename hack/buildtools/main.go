// Command buildtools builds the programs hack/tools pins, unless this
// machine already has them, and prints the directory that holds them.
// Without arguments it builds kube-apiserver, etcd, the hollow kubelet
// (kubemark) and hollowkubelet, kubemark's kubelet with its HTTP pod
// source set, which the Pod API's test runs (`make tools`);
// `make generate` names the code generators.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

func main() {
	names := os.Args[1:]
	if len(names) == 0 {
		names = []string{"kube-apiserver", "etcd", "kubemark", "hollowkubelet"}
	}
	paths, err := controlplane.EnsureTools(context.Background(), os.Stderr, names...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "buildtools: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(filepath.Dir(paths[names[0]]))
}
