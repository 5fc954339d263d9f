package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodeproxy/nodeproxy/test/controlplane"
	"github.com/nodeproxy/nodeproxy/test/testserver"
)

var (
	cp  *controlplane.ControlPlane
	bin string // the nodeproxy binary under test
)

// TestMain builds the nodeproxy binary: these tests are about what an
// operator sees of the command (exit codes, messages, signals), so they run
// the real program, against a real control plane.
func TestMain(m *testing.M) {
	os.Exit(testserver.RunTestsWithNodeproxy(m, controlplane.Options{}, &cp, &bin))
}

func run(t *testing.T, timeout time.Duration, args ...string) (string, int) {
	t.Helper()
	return testserver.RunCommand(t, timeout, bin, args...)
}

func kubeconfigFor(t *testing.T, host string) string { return testserver.AdminKubeconfig(t, cp, host) }

func TestServeRefusesBadInvocations(t *testing.T) {
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	nowhere := "https://127.0.0.1:" + strconv.Itoa(ports[0])
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"kubeconfig pointing nowhere", []string{"serve", "--kubeconfig=" + kubeconfigFor(t, nowhere), "--kube-api-connect-timeout=3s"},
			"kube-apiserver at " + nowhere + " does not answer"},
		{"missing kubeconfig file", []string{"serve", "--kubeconfig=/nonexistent/kubeconfig"}, "/nonexistent/kubeconfig"},
		{"certificate without key", []string{"serve", "--tls-cert-file=/tmp/x.crt"}, "--tls-cert-file and --tls-private-key-file must be given together"},
		{"serving turned off", []string{"serve", "--secure-port=0"}, "--secure-port must not be 0"},
		{"negative shutdown delay", []string{"serve", "--shutdown-delay-duration=-1s"}, "--shutdown-delay-duration must not be negative"},
		{"zero channel queue", []string{"serve", "--watch-channel-queue=0"}, "--watch-channel-queue must be positive"},
		{"shard member without a service", []string{"serve", "--shard-member=nodeproxy-0"}, "--shard-member, --shard-namespace and --shard-peer-ca-file need --shard-service"},
		{"shard service not a DNS label", []string{"serve", "--shard-service=Shards", "--shard-member=nodeproxy-0", "--shard-namespace=nodeproxy"}, "is not a DNS label, as a part of the replicas' stable names must be"},
		{"unknown flag", []string{"serve", "--no-such-flag"}, "unknown flag: --no-such-flag"},
		{"stray argument", []string{"serve", "extra"}, `unknown command "extra"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code := run(t, 30*time.Second, tc.args...)
			if code == 0 {
				t.Fatalf("exit code 0, want non-zero; output:\n%s", out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("output does not say %q:\n%s", tc.want, out)
			}
		})
	}
}

func TestServeDrainsAndExitsOnSIGTERM(t *testing.T) {
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "serve",
		"--kubeconfig="+kubeconfigFor(t, ""),
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(ports[0]),
		"--shutdown-delay-duration=1s",
	)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	}()

	// The serving certificate is self-signed in memory: nothing to trust
	// it by, and only /readyz is asked.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: insecureTLS()}}
	url := "https://127.0.0.1:" + strconv.Itoa(ports[0]) + "/readyz"
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		resp, err := client.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("never ready: %v\n%s", err, out.String())
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30s after SIGTERM\n%s", out.String())
	}
}
