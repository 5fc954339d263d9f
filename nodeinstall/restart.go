package nodeinstall

import (
	"context"
	"errors"
	"fmt"
	"os/exec"

	systemd "github.com/coreos/go-systemd/v22/dbus"
)

// RestartUnit restarts a systemd unit (kubelet.service on kubeadm nodes)
// over the system bus, which a DaemonSet pod reaches with
// /run/dbus/system_bus_socket mounted: no shell, nsenter or host PID
// namespace needed in the image.
func RestartUnit(unit string) func(context.Context) error {
	return func(ctx context.Context) error {
		conn, err := systemd.NewSystemConnectionContext(ctx)
		if err != nil {
			return fmt.Errorf("connect to systemd over the system bus: %w", err)
		}
		defer conn.Close()
		done := make(chan string, 1)
		if _, err := conn.RestartUnitContext(ctx, unit, "replace", done); err != nil {
			return fmt.Errorf("restart %s: %w", unit, err)
		}
		select {
		case result := <-done:
			if result != "done" {
				return fmt.Errorf("restart %s: %s", unit, result)
			}
			return nil
		case <-ctx.Done():
			return fmt.Errorf("restart %s: %w", unit, ctx.Err())
		}
	}
}

// RestartCommand runs argv to restart the kubelet, for nodes without
// systemd, and tests.
func RestartCommand(argv []string) func(context.Context) error {
	return func(ctx context.Context) error {
		if len(argv) == 0 {
			return errors.New("empty kubelet restart command")
		}
		out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %w: %s", argv, err, out)
		}
		return nil
	}
}
