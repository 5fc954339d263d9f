package testserver

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
)

// RunCommand runs bin with args and returns its combined output and exit
// code; it fails the test if the command does not end within timeout.
// Tests of a command run the real program, as an operator does, so that
// what they check is what an operator sees (exit codes, messages).
func RunCommand(t testing.TB, timeout time.Duration, bin string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not end within %s:\n%s", filepath.Base(bin), args, timeout, out)
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	default:
		t.Fatalf("run %s: %v", bin, err)
		return "", -1
	}
}

// AdminKubeconfig writes a kubeconfig of cp's admin, pointed at host
// instead when host is set, into the test's temporary directory and
// returns its path.
func AdminKubeconfig(t testing.TB, cp *controlplane.ControlPlane, host string) string {
	t.Helper()
	cfg := cp.AdminConfig()
	if host != "" {
		cfg.Host = host
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := controlplane.WriteKubeconfig(cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
