package cli

import (
	"runtime/debug"
)

// version is set at link time by make build and make image
// (-X github.com/nodeproxy/nodeproxy/internal/cli.version=<commit>), as
// Kubernetes components stamp theirs: the go command's own VCS stamping is
// off on machines that build from git worktrees (GOFLAGS=-buildvcs=false).
var version string

// VersionLDFlag is the -X flag that sets what Version prints.
const VersionLDFlag = "-X github.com/nodeproxy/nodeproxy/internal/cli.version="

// Version is what `--version` prints: the version stamped at link time,
// else the module version of a `go install`ed tag, else the commit the go
// command stamped, else "devel".
func Version() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			return s.Value
		}
	}
	return "devel"
}
