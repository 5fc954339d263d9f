package controlplane

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// RunTests starts one control plane for a test package, stores it in *cp,
// runs the package's tests and stops it, whatever the tests did. Use it
// from TestMain:
//
//	var cp *controlplane.ControlPlane
//
//	func TestMain(m *testing.M) {
//		os.Exit(controlplane.RunTests(m, controlplane.Options{}, &cp))
//	}
//
// If the test binary dies instead (a panic, -timeout), the kernel kills
// both processes; see StartProcess.
func RunTests(m *testing.M, opts Options, cp **ControlPlane) int {
	if opts.Log == nil {
		opts.Log = os.Stderr
	}
	started, err := Start(context.Background(), opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "start control plane: %v\n", err)
		return 1
	}
	defer started.Stop()
	*cp = started
	return m.Run()
}
