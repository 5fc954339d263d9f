// Command version prints what internal/cli.Version says: the smallest
// command that links the version stamp, which hack/image/oci's tests build
// for every architecture in seconds where nodeproxy takes minutes.
package main

import (
	"fmt"

	"github.com/nodeproxy/nodeproxy/internal/cli"
)

func main() { fmt.Println("version", cli.Version()) }
