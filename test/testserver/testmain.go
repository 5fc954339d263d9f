package testserver

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// RunTests starts one control plane for a test package, stores it in *cp,
// runs the package's tests and stops it, whatever the tests did. Use it
// from TestMain:
//
//	var cp *controlplane.ControlPlane
//
//	func TestMain(m *testing.M) {
//		os.Exit(testserver.RunTests(m, controlplane.Options{}, &cp))
//	}
//
// If the test binary dies instead (a panic, -timeout), the kernel kills
// both processes; see controlplane.StartProcess.
func RunTests(m *testing.M, opts controlplane.Options, cp **controlplane.ControlPlane) int {
	if opts.Log == nil {
		opts.Log = os.Stderr
	}
	started, err := controlplane.Start(context.Background(), opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "start control plane: %v\n", err)
		return 1
	}
	defer started.Stop()
	*cp = started
	return m.Run()
}

// RunTestsWithNodeproxy is RunTests for packages that run nodeproxy as its
// own process: it also builds the nodeproxy binary and stores its path in
// *bin.
func RunTestsWithNodeproxy(m *testing.M, opts controlplane.Options, cp **controlplane.ControlPlane, bin *string) int {
	return RunTestsWithCommands(m, opts, cp, map[string]*string{"nodeproxy": bin})
}

// RunTestsWithCommands is RunTests for packages that run several of this
// repository's commands: it builds each cmd/<name> of bins into one
// directory, as make build lays them out in bin/ (so that a binary finds
// its siblings), and stores each path in bins[name].
func RunTestsWithCommands(m *testing.M, opts controlplane.Options, cp **controlplane.ControlPlane, bins map[string]*string) int {
	dir, err := os.MkdirTemp("", "nodeproxy-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	for name, bin := range bins {
		if *bin, err = controlplane.BuildCommand(context.Background(), dir, name); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return RunTests(m, opts, cp)
}
