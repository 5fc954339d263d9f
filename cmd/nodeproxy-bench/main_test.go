package main

import (
	"os"
	"testing"
	"time"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

var (
	cp  *controlplane.ControlPlane
	bin string // nodeproxy-bench, the binary under test
	hub string // nodeproxy, which the kubeconfig test runs as the hub
)

// TestMain builds nodeproxy-bench and nodeproxy side by side, as make build
// lays them out: these tests are about what an operator sees of the
// command (exit codes, messages, signals), so they run the real program,
// against a real control plane.
func TestMain(m *testing.M) {
	os.Exit(testserver.RunTestsWithCommands(m, controlplane.Options{}, &cp, map[string]*string{"nodeproxy-bench": &bin, "nodeproxy": &hub}))
}

func run(t *testing.T, timeout time.Duration, args ...string) (string, int) {
	t.Helper()
	return testserver.RunCommand(t, timeout, bin, args...)
}
